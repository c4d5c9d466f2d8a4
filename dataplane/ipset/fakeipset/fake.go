// Package fakeipset is an in-memory ipset kernel for tests of code that
// drives lbd's sets: it refuses what the kernel refuses (adding to or
// deleting from a missing set, adding an entry twice, deleting a missing
// one; in a skbinfo set an entry is its element whatever its mark) and
// counts every call.
package fakeipset

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/dataplane/ipset"
)

// Kernel is the fake. The zero value has no sets. It is safe for
// concurrent use.
type Kernel struct {
	mu            sync.Mutex
	sets          map[string]*set
	Dumps, Writes int
	// Interrupt makes the next Interrupt dumps act as the kernel's when a
	// concurrent change interrupts them: they deliver every entry twice,
	// then fail with genl.ErrDumpInterrupted.
	Interrupt int
}

type set struct {
	spec    desired.SetSpec
	entries map[desired.SetEntry]bool
}

var _ ipset.Kernel = (*Kernel)(nil)

// Dump lists every set (in no particular order, as the kernel) from a
// copy taken at the call.
func (k *Kernel) Dump(set func(name string, t desired.SetType, family int) func(desired.SetEntry)) error {
	k.mu.Lock()
	k.Dumps++
	interrupted := k.Interrupt > 0
	if interrupted {
		k.Interrupt--
	}
	specs := make([]desired.SetSpec, 0, len(k.sets))
	entries := make([][]desired.SetEntry, 0, len(k.sets))
	for _, s := range k.sets {
		specs = append(specs, s.spec)
		entries = append(entries, slices.Collect(maps.Keys(s.entries)))
	}
	k.mu.Unlock()
	for i, spec := range specs {
		if entry := set(spec.Name, ipset.ListedType(spec), spec.Family); entry != nil {
			for _, e := range entries[i] {
				entry(e)
				if interrupted {
					entry(e)
				}
			}
		}
	}
	if interrupted {
		return fmt.Errorf("ipset dump: %w", genl.ErrDumpInterrupted)
	}
	return nil
}

// Has reports whether a set exists.
func (k *Kernel) Has(name string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.sets[name]
	return ok
}

func (k *Kernel) Create(spec desired.SetSpec) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if _, ok := k.sets[spec.Name]; ok {
		return fmt.Errorf("set %s: %w", spec.Name, syscall.EEXIST)
	}
	if k.sets == nil {
		k.sets = map[string]*set{}
	}
	k.sets[spec.Name] = &set{spec: spec, entries: map[desired.SetEntry]bool{}}
	return nil
}

func (k *Kernel) Destroy(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if _, ok := k.sets[name]; !ok {
		return fmt.Errorf("set %s: %w", name, syscall.ENOENT)
	}
	delete(k.sets, name)
	return nil
}

func (k *Kernel) Add(name string, e desired.SetEntry) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	s, ok := k.sets[name]
	switch {
	case !ok:
		return fmt.Errorf("set %s: %w", name, syscall.ENOENT)
	case s.find(e) != nil:
		return fmt.Errorf("%s in %s: %w", e, name, syscall.EEXIST)
	}
	s.entries[e] = true
	return nil
}

// find returns the entry of s that is e's element (the same entry, or in
// a skbinfo set the same element with any mark), or nil.
func (s *set) find(e desired.SetEntry) *desired.SetEntry {
	if s.entries[e] {
		return &e
	}
	if !s.spec.SkbInfo {
		return nil
	}
	for x := range s.entries {
		y := x
		y.Mark = e.Mark
		if y == e {
			return &x
		}
	}
	return nil
}

func (k *Kernel) Del(name string, e desired.SetEntry) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	s, ok := k.sets[name]
	switch {
	case !ok:
		return fmt.Errorf("set %s: %w", name, syscall.ENOENT)
	case s.find(e) == nil:
		return fmt.Errorf("%s in %s: %w", e, name, syscall.ENOENT)
	}
	delete(s.entries, *s.find(e))
	return nil
}

// Flush empties a set, as drift.
func (k *Kernel) Flush(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.sets[name]; ok {
		clear(s.entries)
	}
}

// String lists every non-empty set's entries, sorted, one set a line.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(k.sets)) {
		s := k.sets[name]
		if len(s.entries) == 0 {
			continue
		}
		var es []string
		for _, e := range slices.SortedFunc(maps.Keys(s.entries), desired.SetEntry.Compare) {
			es = append(es, e.String())
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(es, " "))
	}
	return b.String()
}
