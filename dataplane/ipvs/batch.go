package ipvs

// The applier's cold path: creating many virtual servers at once through
// the kernel's BatchAdder (NetlinkKernel.AddServices, batch_linux.go).

import (
	"errors"
	"fmt"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// BatchAdder is a Kernel that can create many virtual servers with their
// destinations at once, faster than one call per object: the cold path
// (an empty kernel, 110,000 objects at 10,000 services) uses it.
type BatchAdder interface {
	// AddServices creates each service with all its destinations and
	// returns one error per service (nil: all of it was created).
	AddServices([]Service) []error
}

// addNew creates the wanted virtual servers the cache does not hold, with
// their destinations, through the kernel's BatchAdder if it has one. It
// returns what it did, by key: false when a virtual server was created
// whole (and cached: nothing is left to write for it, so this sync need
// not visit it again, which halves a cold sync's Go work), true when it
// failed (it may be partly created, so the kernel is read again at the
// next sync, and this sync leaves it alone).
func (a *Applier) addNew(want []desired.Service, res *Result, errs *[]error) map[lvs.Key]bool {
	b, ok := a.k.(BatchAdder)
	if !ok {
		return nil
	}
	var done map[lvs.Key]bool
	var batch []Service
	var from []*desired.Service
	flush := func() {
		for i, err := range b.AddServices(batch) {
			svc := batch[i]
			res.Writes += 1 + len(svc.Dests)
			if a.takenAlready(from[i], err) {
				err = a.foreignNow(from[i])
			}
			if err != nil {
				if !errors.As(err, new(Refused)) {
					a.valid = false // it may be partly created
				}
				*errs = append(*errs, fmt.Errorf("adding %s: %w", location{from[i]}, err))
				if done == nil {
					done = map[lvs.Key]bool{}
				}
				done[svc.Key] = true
				continue
			}
			e := a.newEntry(svc, len(svc.Dests))
			for _, d := range svc.Dests {
				e.dests = append(e.dests, destState{addr: d.Addr, weight: int32(d.Weight), fwd: pack(d.Forward)})
			}
			a.cache.put(svc.Key, e)
			if done == nil {
				done = make(map[lvs.Key]bool, len(want))
			}
			done[svc.Key] = false
		}
		batch, from = batch[:0], from[:0]
	}
	for i := range want {
		s := &want[i]
		if a.cache.get(s.Key) != nil || a.foreign[s.Key] {
			continue
		}
		svc := fromDesired(*s)
		svc.Dests = make([]Dest, len(s.Dests))
		for j, d := range s.Dests {
			svc.Dests[j] = Dest{Addr: d.Addr, Weight: d.Weight, Forward: d.Forward()}
		}
		batch = append(batch, svc)
		from = append(from, s)
		// In parts: the whole table as kernel objects would double what
		// the cache holds while it is written.
		if len(batch) == addBatch {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	return done
}

// addBatch is how many virtual servers addNew hands the kernel at once.
const addBatch = 512
