package ipvs

import (
	"fmt"
	"maps"
	"slices"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// refresh replaces the cache with a dump of the kernel, keeping what lbd
// owns or wants and the drain state of destinations still there.
func (a *Applier) refresh(owned map[lvs.Key]bool, want []desired.Service) error {
	dump, err := a.k.Dump()
	if err != nil {
		a.valid = false
		return fmt.Errorf("dumping IPVS: %w", err)
	}
	// relevant: lbd's (true), or wanted and foreign if it exists (false).
	relevant := make(map[lvs.Key]bool, len(owned)+len(want))
	maps.Copy(relevant, owned)
	for i := range want {
		if _, ok := relevant[want[i].Key]; !ok {
			relevant[want[i].Key] = a.mayAdopt(&want[i])
		}
	}
	clear(a.foreign)
	cache := newIndex(max(len(dump), len(want))) // a cold sync adds want to it
	for _, s := range dump {
		mine, ok := relevant[s.Key]
		if !ok {
			continue // not lbd's: never touched
		}
		if !mine {
			if a.foreign == nil {
				a.foreign = map[lvs.Key]bool{}
			}
			a.foreign[s.Key] = true
			continue
		}
		e := a.newEntry(s, len(s.Dests))
		var old *entry
		if a.cache != nil {
			old = a.cache.get(s.Key)
		}
		for _, d := range s.Dests {
			ds := destState{addr: d.Addr, weight: int32(d.Weight), fwd: pack(d.Forward), conns: int32(d.ActiveConns + d.InactiveConns), active: int32(d.ActiveConns)}
			if old != nil {
				if i, ok := old.find(d.Addr); ok {
					ds.draining = old.dests[i].draining
				}
			}
			e.dests = append(e.dests, ds)
		}
		slices.SortFunc(e.dests, func(a, b destState) int { return a.addr.Compare(b.addr) })
		cache.put(s.Key, e)
	}
	a.cache, a.valid = cache, true
	return nil
}
