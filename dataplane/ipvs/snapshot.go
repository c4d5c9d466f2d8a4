package ipvs

import (
	"iter"
	"maps"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/lvs"
)

// The applier's cache is shared with readers in other goroutines (status,
// metrics) by copy-on-write: Snapshot hands out the cache as it is and
// marks it shared; the next change copies the shard of the index it
// touches and the entry it changes, so a snapshot never changes and taking
// one costs nothing. A sync that changes one destination of 10,000
// services copies about 160 index slots and that service's entry, not the
// whole index (1 MB) or the 100,000 destinations.

// indexShards is how many maps the index is split into: a copy-on-write
// copies one of them.
const indexShards = 64

// index maps keys to cache entries, in shards.
type index struct {
	shards [indexShards]map[lvs.Key]*entry
	// shared marks the shards a snapshot holds: put and drop copy them
	// first.
	shared [indexShards]bool
}

func newIndex(size int) *index {
	x := &index{}
	for i := range x.shards {
		x.shards[i] = make(map[lvs.Key]*entry, size/indexShards)
	}
	return x
}

// shardOf mixes the address's last bytes, the port and the mark: cheap,
// and spread over the shards for the usual runs of VIPs and ports. A
// skewed set of keys costs copying time, never correctness.
func shardOf(k lvs.Key) int {
	a := k.Addr.As16()
	h := uint32(a[15]) | uint32(a[14])<<8 | uint32(a[13])<<16 | uint32(a[12])<<24
	h ^= uint32(k.Port)*0x9e3779b1 ^ k.FWMark*0x85ebca6b
	h *= 0xcc9e2d51
	return int(h >> 26) // the top 6 bits: 64 shards
}

func (x *index) get(k lvs.Key) *entry { return x.shards[shardOf(k)][k] }

func (x *index) put(k lvs.Key, e *entry) { x.own(shardOf(k))[k] = e }

func (x *index) drop(k lvs.Key) { delete(x.own(shardOf(k)), k) }

// own returns shard i, copied first if a snapshot holds it.
func (x *index) own(i int) map[lvs.Key]*entry {
	if x.shared[i] {
		x.shards[i], x.shared[i] = maps.Clone(x.shards[i]), false
	}
	return x.shards[i]
}

func (x *index) len() int {
	n := 0
	for _, m := range x.shards {
		n += len(m)
	}
	return n
}

// all iterates over every entry.
func (x *index) all() iter.Seq2[lvs.Key, *entry] {
	return func(yield func(lvs.Key, *entry) bool) {
		for _, m := range x.shards {
			for k, e := range m {
				if !yield(k, e) {
					return
				}
			}
		}
	}
}

// Snapshot is what the applier knew of the kernel when it was taken. It
// never changes, so any goroutine may read it; the zero Snapshot knows
// nothing.
type Snapshot struct {
	x *index // a copy of the applier's index at the time: its shards, shared
}

// Snapshot returns the applier's knowledge of the kernel now. Like Apply,
// it must not run concurrently with Apply; the snapshot itself may be read
// anywhere.
func (a *Applier) Snapshot() Snapshot {
	if a.cache == nil {
		return Snapshot{}
	}
	frozen := &index{shards: a.cache.shards}
	for i := range a.cache.shared {
		a.cache.shared[i] = true
	}
	a.gen++ // every entry now belongs to the snapshot
	return Snapshot{x: frozen}
}

// Conns returns each destination's connection counts as of the last full
// reconcile's dump (stale by up to sync_period): metrics read them without
// a kernel dump per scrape. It is nil when the snapshot knows nothing.
func (s Snapshot) Conns() map[lvs.Key]map[netip.AddrPort]Conns {
	return perDest(s, func(d *destState) Conns { return Conns{Active: int(d.active), Inactive: int(d.conns - d.active)} })
}

// Weights returns the weight each destination has in the kernel as far as
// the applier knows; a missing entry is not in the kernel. It is nil when
// the snapshot knows nothing.
func (s Snapshot) Weights() map[lvs.Key]map[netip.AddrPort]int {
	return perDest(s, func(d *destState) int { return int(d.weight) })
}

// perDest maps every destination of the snapshot through f.
func perDest[T any](s Snapshot, f func(*destState) T) map[lvs.Key]map[netip.AddrPort]T {
	if s.x == nil {
		return nil
	}
	out := make(map[lvs.Key]map[netip.AddrPort]T, s.x.len())
	for k, e := range s.x.all() {
		m := make(map[netip.AddrPort]T, len(e.dests))
		for i := range e.dests {
			m[e.dests[i].addr] = f(&e.dests[i])
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
	a.cache.put(key, c)
	return c
}
