// Package ownership keeps what lbd knows, across its restarts, of the
// kernel state it made: which edition of the configuration it last
// applied, and what its own virtual servers held when it started. The
// safety valve measures the first sync after a restart against that.
package ownership

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// AppliedFile, in the state directory, holds the edition (the hash of the
// configuration files) lbd last applied: at a restart, the same edition
// means the admin changed nothing meanwhile, so the safety valve guards
// the first sync against the kernel's state (see Baseline).
const AppliedFile = "applied-config"

// Baseline is what the safety valve measures the first sync after a
// restart against: lbd's virtual servers (owned, sorted by key) with the
// real servers they send traffic to (weight 0 ones are draining or held by
// a check, and a sync that drops them deletes no capacity).
func Baseline(owned []ipvs.Service) []desired.Service {
	out := make([]desired.Service, 0, len(owned))
	for _, s := range owned {
		vs := s.Desired()
		for _, d := range s.Dests {
			if d.Weight <= 0 {
				continue
			}
			dest := desired.Dest{Addr: d.Addr, Weight: d.Weight}
			if d.Forward != (lvs.Forward{}) {
				// A held destination goes back as the kernel forwards it.
				dest.Real = &config.RealServer{Address: d.Addr.Addr(), Port: d.Addr.Port(), Weight: d.Weight, Forward: d.Forward}
			}
			vs.Dests = append(vs.Dests, dest)
		}
		slices.SortFunc(vs.Dests, func(a, b desired.Dest) int { return a.Addr.Compare(b.Addr) })
		out = append(out, vs)
	}
	return out
}

// ReadApplied returns the edition WriteApplied stored in stateDir, ""
// when there is none.
func ReadApplied(stateDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, AppliedFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the applied configuration's hash: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// WriteApplied records edition as the configuration lbd applied, by
// rename, so that a crash leaves the old edition or the new one.
func WriteApplied(stateDir, edition string) error {
	path := filepath.Join(stateDir, AppliedFile)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(edition+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the applied configuration's hash: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("recording the applied configuration's hash: %w", err)
	}
	return nil
}
