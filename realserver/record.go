package realserver

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
)

// DefaultRecord is where setup records what it changed. It is under /run
// on purpose: a reboot forgets the addresses and sysctls setup made, and
// the record with them.
const DefaultRecord = "/run/lbd/realserver.json"

// Record is what setup changed on this box, oldest first, so that undo
// takes back only that.
type Record struct {
	Entries []Entry `json:"entries"`
}

// Entry is one change and the forwarding method it was made for.
type Entry struct {
	Method string `json:"method"`
	Action Action `json:"action"`
}

func (r *Record) add(method string, a Action) {
	if a.Kind == SetSysctl {
		// The value before the first change is the one to restore.
		for i, e := range r.Entries {
			if e.Action.Kind == SetSysctl && e.Action.Key == a.Key {
				r.Entries[i].Action.Value = a.Value
				return
			}
		}
	}
	r.Entries = append(r.Entries, Entry{Method: method, Action: a})
}

// findAddr returns the index of the entry that added p, or of any address
// when p is the zero prefix; -1 when there is none.
func (r *Record) findAddr(p netip.Prefix) int {
	for i, e := range r.Entries {
		if e.Action.Kind == AddAddr && (!p.IsValid() || e.Action.Prefix == p) {
			return i
		}
	}
	return -1
}

func (r *Record) remove(i int) { r.Entries = append(r.Entries[:i], r.Entries[i+1:]...) }

// LoadRecord reads the record at path; a missing file is an empty record.
func LoadRecord(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Record{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading setup's record: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("reading setup's record %s: %w", path, err)
	}
	return &r, nil
}

// Save writes the record to path whole (a temporary file renamed over
// it), or removes the file when the record is empty.
func (r *Record) Save(path string) error {
	if len(r.Entries) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing setup's record: %w", err)
		}
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding setup's record: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing setup's record: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing setup's record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing setup's record: %w", err)
	}
	return nil
}
