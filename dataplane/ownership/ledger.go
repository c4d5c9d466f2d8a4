package ownership

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// ledgerVersion is the format lbd writes and the only one it reads.
const ledgerVersion = 1

// maxLedger bounds what Owned reads: 65,536 keys of the longest form fit.
const maxLedger = 8 << 20

// UnreadableError says the ledger exists but lbd cannot read it: it is
// truncated, corrupt or of an unknown format version.
type UnreadableError struct {
	Path string
	Err  error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("ownership ledger %s is unreadable: %v; lbd cannot tell which IPVS virtual servers it created", e.Path, e.Err)
}

func (e *UnreadableError) Unwrap() error { return e.Err }

// Owned reads the file; a missing file owns nothing.
func (l FileLedger) Owned() (map[lvs.Key]bool, error) {
	b, err := readCapped(l.Path, maxLedger)
	if errors.Is(err, os.ErrNotExist) {
		return map[lvs.Key]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	var f ledgerFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, &UnreadableError{l.Path, err}
	}
	if f.Version != ledgerVersion {
		return nil, &UnreadableError{l.Path, fmt.Errorf("format version %d; this lbd reads version %d", f.Version, ledgerVersion)}
	}
	out := make(map[lvs.Key]bool, len(f.IPVS))
	for _, s := range f.IPVS {
		k, err := lvs.ParseKey(s)
		if err != nil {
			return nil, &UnreadableError{l.Path, err}
		}
		out[k] = true
	}
	return out, nil
}

// readCapped reads a regular file of at most limit bytes.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, &UnreadableError{path, fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		return nil, &UnreadableError{path, fmt.Errorf("larger than %d bytes", limit)}
	}
	return b, err
}

// SetOwned replaces the file atomically.
func (l FileLedger) SetOwned(keys map[lvs.Key]bool) error {
	f := ledgerFile{Version: ledgerVersion, IPVS: []string{}}
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
