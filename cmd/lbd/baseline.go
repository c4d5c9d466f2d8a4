package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
)

// appliedConfigFile, in the state directory, holds the hash of the
// configuration files lbd last applied: at a restart, the same hash means
// the admin changed nothing meanwhile, so the safety valve guards the
// first sync against the kernel's state (see restartBaseline).
const appliedConfigFile = "applied-config"

// restartBaseline is what the safety valve measures the first sync after
// a restart against: lbd's virtual servers with the real servers they
// send traffic to (weight 0 ones are draining or held by a check, and a
// sync that drops them deletes no capacity).
func restartBaseline(owned []ipvs.Service) []desired.Service {
	out := make([]desired.Service, 0, len(owned))
	for _, s := range owned {
		vs := desired.Service{Key: s.Key, Scheduler: s.Scheduler, Flags: s.Flags, Timeout: s.Timeout, Netmask: s.Netmask}
		for _, d := range s.Dests {
			if d.Weight > 0 {
				vs.Dests = append(vs.Dests, desired.Dest{Addr: d.Addr, Weight: d.Weight})
			}
		}
		slices.SortFunc(vs.Dests, func(a, b desired.Dest) int { return a.Addr.Compare(b.Addr) })
		out = append(out, vs)
	}
	return out
}

// readAppliedHash returns the hash stored by writeAppliedHash, "" when
// there is none.
func readAppliedHash(stateDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, appliedConfigFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the applied configuration's hash: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeAppliedHash records hash as the configuration lbd applied, by
// rename, so that a crash leaves the old hash or the new one.
func writeAppliedHash(stateDir, hash string) error {
	path := filepath.Join(stateDir, appliedConfigFile)
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(hash+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the applied configuration's hash: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("recording the applied configuration's hash: %w", err)
	}
	return nil
}
