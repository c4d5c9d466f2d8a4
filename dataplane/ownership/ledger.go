package ownership

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// FileLedger keeps the virtual servers lbd owns in a JSON file (it is the
// ipvs.Ledger of lbd run): lbd deletes only what it lists, and lists what
// it creates before creating it. It belongs in
// /run: IPVS state and /run both end with a reboot, and both outlive a
// restart of lbd.
type FileLedger struct {
	Path string
}

type ledgerFile struct {
	Version int      `json:"version"`
	IPVS    []string `json:"ipvs"`
}

// Owned reads the file; a missing file owns nothing.
func (l FileLedger) Owned() (map[lvs.Key]bool, error) {
	b, err := os.ReadFile(l.Path)
	if errors.Is(err, os.ErrNotExist) {
		return map[lvs.Key]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f ledgerFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", l.Path, err)
	}
	out := make(map[lvs.Key]bool, len(f.IPVS))
	for _, s := range f.IPVS {
		k, err := lvs.ParseKey(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.Path, err)
		}
		out[k] = true
	}
	return out, nil
}

// SetOwned replaces the file atomically.
func (l FileLedger) SetOwned(keys map[lvs.Key]bool) error {
	f := ledgerFile{Version: 1, IPVS: []string{}}
	for _, k := range slices.SortedFunc(maps.Keys(keys), lvs.Key.Compare) {
		f.IPVS = append(f.IPVS, k.String())
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(l.Path), 0o700); err != nil {
		return err
	}
	tmp := l.Path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, l.Path)
}

// Read returns the virtual servers l owns as k holds them (those the
// ledger lists but the kernel lacks are left out), sorted by key: what a
// restarted lbd adopts, and what lbd cleanup removes.
func Read(k ipvs.Kernel, l ipvs.Ledger) ([]ipvs.Service, error) {
	owned, err := l.Owned()
	if err != nil {
		return nil, fmt.Errorf("reading owned IPVS services: %w", err)
	}
	dump, err := k.Dump()
	if err != nil {
		return nil, fmt.Errorf("dumping IPVS: %w", err)
	}
	dump = slices.DeleteFunc(dump, func(s ipvs.Service) bool { return !owned[s.Key] })
	slices.SortFunc(dump, func(a, b ipvs.Service) int { return a.Key.Compare(b.Key) })
	return dump, nil
}
