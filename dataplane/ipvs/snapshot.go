package ipvs

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/lvs"
)

// The applier's cache is shared with readers in other goroutines (status,
// metrics) by copy-on-write: Snapshot hands out the cache as it is and
// marks it shared; the next change copies the index once and each entry it
// changes, so a snapshot never changes and taking one costs nothing. A
// sync that changes one destination of 10,000 services copies the index
// and that service's entry, not the 100,000 destinations.

// Snapshot is what the applier knew of the kernel when it was taken. It
// never changes, so any goroutine may read it; the zero Snapshot knows
// nothing.
type Snapshot struct {
	cache map[lvs.Key]*entry
}

// Snapshot returns the applier's knowledge of the kernel now. Like Apply,
// it must not run concurrently with Apply; the snapshot itself may be read
// anywhere.
func (a *Applier) Snapshot() Snapshot {
	if a.cache == nil {
		return Snapshot{}
	}
	a.shared = true
	a.gen++ // every entry now belongs to the snapshot
	return Snapshot{cache: a.cache}
}

// Known reports whether the snapshot holds a view of the kernel: false
// before the applier first read or wrote it.
func (s Snapshot) Known() bool { return s.cache != nil }

// Conns returns each destination's connection counts as of the last full
// reconcile's dump (stale by up to sync_period): metrics read them without
// a kernel dump per scrape. It is nil when the snapshot knows nothing.
func (s Snapshot) Conns() map[lvs.Key]map[netip.AddrPort]Conns {
	if s.cache == nil {
		return nil
	}
	out := make(map[lvs.Key]map[netip.AddrPort]Conns, len(s.cache))
	for k, e := range s.cache {
		m := make(map[netip.AddrPort]Conns, len(e.dests))
		for _, d := range e.dests {
			m[d.addr] = Conns{Active: int(d.active), Inactive: int(d.conns - d.active)}
		}
		out[k] = m
	}
	return out
}

// Weights returns the weight each destination has in the kernel as far as
// the applier knows; a missing entry is not in the kernel. It is nil when
// the snapshot knows nothing.
func (s Snapshot) Weights() map[lvs.Key]map[netip.AddrPort]int {
	if s.cache == nil {
		return nil
	}
	out := make(map[lvs.Key]map[netip.AddrPort]int, len(s.cache))
	for k, e := range s.cache {
		m := make(map[netip.AddrPort]int, len(e.dests))
		for _, d := range e.dests {
			m[d.addr] = int(d.weight)
		}
		out[k] = m
	}
	return out
}

// newEntry returns an empty entry for svc that no snapshot shares.
func (a *Applier) newEntry(svc Service, dests int) *entry {
	svc.Dests = nil
	return &entry{svc: svc, dests: make([]destState, 0, dests), gen: a.gen}
}

// writable returns e (the cache's entry for key), copied into the cache
// first when a snapshot shares it.
func (a *Applier) writable(key lvs.Key, e *entry) *entry {
	if e.gen == a.gen {
		return e
	}
	c := &entry{svc: e.svc, dests: slices.Clone(e.dests), gen: a.gen}
	a.put(key, c)
	return c
}

// put and drop change the cache's index, copying it first when a
// snapshot shares it.
func (a *Applier) put(key lvs.Key, e *entry) {
	a.ownIndex()
	a.cache[key] = e
}

func (a *Applier) drop(key lvs.Key) {
	a.ownIndex()
	delete(a.cache, key)
}

func (a *Applier) ownIndex() {
	if !a.shared {
		return
	}
	a.cache, a.shared = maps.Clone(a.cache), false
	if a.cache == nil {
		a.cache = map[lvs.Key]*entry{}
	}
}
