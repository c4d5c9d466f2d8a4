// Package ipset keeps lbd's fixed ipsets and their entries in step with the
// desired state: it creates missing sets (recreating one of the wrong
// type), and adds and deletes only the entries that differ — against a
// cache on requested syncs, against one dump of every set on full ones.
// Sets whose names are not lbd's are never touched.
package ipset

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// Set is one set as the kernel holds it.
type Set struct {
	Type    desired.SetType
	Family  int
	Entries []desired.SetEntry
}

// Kernel is the kernel's ipsets. Dump lists every lbd set (LBD- and LBD6-
// names) with its entries in one pass.
type Kernel interface {
	Dump() (map[string]Set, error)
	Create(desired.SetSpec) error
	Destroy(name string) error
	Add(set string, e desired.SetEntry) error
	Del(set string, e desired.SetEntry) error
}

// IsLBD reports whether a set name is lbd's.
func IsLBD(name string) bool {
	return strings.HasPrefix(name, "LBD-") || strings.HasPrefix(name, "LBD6-")
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps   int
	Writes  int
	Entries int // entries in lbd's sets after the apply
}

// Applier applies lbd's sets.
type Applier struct {
	k     Kernel
	cache map[string]map[desired.SetEntry]bool // nil until a dump succeeded
}

// New returns an Applier over k.
func New(k Kernel) *Applier { return &Applier{k: k} }

// Apply makes every set in specs exist with exactly the entries in want.
func (a *Applier) Apply(specs []desired.SetSpec, want map[string][]desired.SetEntry, full bool) (Stats, error) {
	var st Stats
	if full || a.cache == nil {
		dump, err := a.k.Dump()
		st.Dumps++
		if err != nil {
			a.cache = nil
			return st, fmt.Errorf("listing ipsets: %w", err)
		}
		a.cache = map[string]map[desired.SetEntry]bool{}
		for _, spec := range specs {
			s, ok := dump[spec.Name]
			if !ok || s.Type != spec.Type || s.Family != spec.Family {
				continue // created below
			}
			m := make(map[desired.SetEntry]bool, len(s.Entries))
			for _, e := range s.Entries {
				m[e] = true
			}
			a.cache[spec.Name] = m
		}
		// A set of lbd's name but the wrong type (an older lbd, a hand
		// edit) is replaced; a set in use by a rule cannot be, and says so.
		for _, spec := range specs {
			if s, ok := dump[spec.Name]; ok && (s.Type != spec.Type || s.Family != spec.Family) {
				st.Writes++
				if err := a.k.Destroy(spec.Name); err != nil {
					return st, fmt.Errorf("replacing ipset %s (%s, want %s): %w", spec.Name, s.Type, spec.Type, err)
				}
			}
		}
	}
	var errs []error
	for _, spec := range specs {
		have, ok := a.cache[spec.Name]
		if !ok {
			st.Writes++
			if err := a.k.Create(spec); err != nil {
				errs = append(errs, fmt.Errorf("creating ipset %s: %w", spec.Name, err))
				continue
			}
			have = map[desired.SetEntry]bool{}
			a.cache[spec.Name] = have
		}
		wantSet := make(map[desired.SetEntry]bool, len(want[spec.Name]))
		for _, e := range want[spec.Name] {
			wantSet[e] = true
			if have[e] {
				continue
			}
			st.Writes++
			if err := a.k.Add(spec.Name, e); err != nil {
				errs = append(errs, fmt.Errorf("adding %s to ipset %s: %w", e, spec.Name, err))
				continue
			}
			have[e] = true
		}
		// Every wanted entry is in have now (or failed): only a larger
		// have holds entries to delete, so most syncs skip the scan.
		if len(have) <= len(wantSet) {
			st.Entries += len(have)
			continue
		}
		for _, e := range slices.SortedFunc(maps.Keys(have), desired.SetEntry.Compare) {
			if wantSet[e] {
				continue
			}
			st.Writes++
			if err := a.k.Del(spec.Name, e); err != nil {
				errs = append(errs, fmt.Errorf("deleting %s from ipset %s: %w", e, spec.Name, err))
				continue
			}
			delete(have, e)
		}
		st.Entries += len(have)
	}
	if len(errs) > 0 {
		a.cache = nil // re-read before trusting it again
	}
	return st, errors.Join(errs...)
}

// Counts returns the number of entries per set as last applied.
func (a *Applier) Counts() map[string]int {
	out := make(map[string]int, len(a.cache))
	for name, m := range a.cache {
		out[name] = len(m)
	}
	return out
}

// Cleanup destroys every lbd set (after the rules that use them are gone).
func Cleanup(k Kernel) ([]string, error) {
	dump, err := k.Dump()
	if err != nil {
		return nil, fmt.Errorf("listing ipsets: %w", err)
	}
	var done []string
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(dump)) {
		if err := k.Destroy(name); err != nil {
			errs = append(errs, fmt.Errorf("destroying ipset %s: %w", name, err))
			continue
		}
		done = append(done, "ipset "+name)
	}
	return done, errors.Join(errs...)
}
