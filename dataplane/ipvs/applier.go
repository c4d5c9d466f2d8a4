// Package ipvs keeps the kernel's IPVS table in step with the desired
// virtual servers: it diffs against a cache of what it last wrote (or, on a
// full sync, against one dump of the kernel), writes only the difference,
// drains removed destinations gracefully, and touches only the virtual
// servers lbd owns.
package ipvs

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// Service is a virtual server as the kernel holds it.
type Service struct {
	Key       lvs.Key
	Scheduler string
	Flags     uint32
	Timeout   uint32
	Netmask   uint32
	Dests     []Dest
}

// Dest is a destination as the kernel holds it. Connection counts are
// filled by dumps and ignored by writes.
type Dest struct {
	Addr          netip.AddrPort
	Weight        int
	Forward       lvs.Forward
	ActiveConns   int
	InactiveConns int
}

// Kernel is the IPVS table. Dump returns every virtual server with its
// destinations in one pass; the writes are one kernel message each.
type Kernel interface {
	Dump() ([]Service, error)
	AddService(Service) error
	UpdateService(Service) error
	DeleteService(lvs.Key) error
	AddDest(lvs.Key, Dest) error
	UpdateDest(lvs.Key, Dest) error
	DeleteDest(lvs.Key, netip.AddrPort) error
}

// Ledger remembers which virtual servers lbd owns, across restarts, so
// that lbd deletes only what it created or adopted.
type Ledger interface {
	Owned() (map[lvs.Key]bool, error)
	SetOwned(map[lvs.Key]bool) error
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps  int
	Writes int
}

// Result is what one Apply reached.
type Result struct {
	Stats
	// Draining lists destinations kept at weight 0 until their connections
	// end or their drain timeout passes.
	Draining int
	// DeletedUDP lists UDP destinations deleted, whose conntrack entries
	// should go too so that clients do not keep sending to them.
	DeletedUDP []UDPDest
	// Failed lists the virtual servers a kernel write failed for; the
	// others were applied.
	Failed []lvs.Key
}

// UDPDest is a deleted UDP destination of one virtual server.
type UDPDest struct {
	Service lvs.Key
	Real    netip.AddrPort
}

// Refused is the kernel's clean refusal of one add or edit: nothing was
// created or changed, so what the applier knows of the kernel stays true
// and the next sync need not dump it. One virtual server the kernel keeps
// refusing then costs one failed write per sync, not a full reconcile.
type Refused struct{ Err error }

func (r Refused) Error() string { return r.Err.Error() }
func (r Refused) Unwrap() error { return r.Err }

// Refusal returns err as Refused when it is an add's or an edit's EINVAL
// (an argument the kernel takes for invalid) or ENOENT (no such scheduler
// module): both are answered before the kernel changes anything. Other
// errors (EEXIST, ESRCH: the cache was wrong; no answer at all) are
// returned as they are.
func Refusal(err error) error {
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return Refused{err}
	}
	return err
}

// Applier applies desired virtual servers to a Kernel. It is not safe for
// concurrent use: the sync runner serialises calls.
type Applier struct {
	k      Kernel
	ledger Ledger
	// cache is what the applier knows of the kernel: lbd's virtual
	// servers. Snapshots share it (snapshot.go): the index copies a shard
	// a snapshot holds before changing it, and entries of an older gen
	// than the applier's belong to a snapshot and are copied too.
	cache *index
	gen   uint64
	// owned caches the ledger: the applier is its only writer, so it is
	// read once (per process) rather than parsed on every sync.
	owned map[lvs.Key]bool
	// fresh are the keys this Apply claimed (not owned before it);
	// foreign, those wanted that exist and are not lbd's (foreign.go),
	// as of the last dump or failed add; adoptAddrs, see AdoptAddrs.
	fresh      map[lvs.Key]bool
	foreign    map[lvs.Key]bool
	adoptAddrs map[netip.Addr]bool
	// valid is false until a dump succeeded and after any failed write:
	// then the cache cannot be trusted and the next Apply dumps.
	valid bool
	// prev is the list last applied without error, while valid: a
	// requested sync skips the virtual servers that did not change.
	// prevEntries holds their cache entries, in the same order.
	prev        []desired.Service
	prevEntries []*entry
	// epoch is the origin of destState.draining.
	epoch time.Time
}

type entry struct {
	svc   Service     // attributes only; destinations are in dests
	dests []destState // sorted by address
	gen   uint64      // the applier's gen when this entry was made
}

// destState is one destination as the applier knows it, in 56 bytes: the
// cache holds one per real server of every service (100,000 at scale).
type destState struct {
	addr   netip.AddrPort
	weight int32
	active int32 // at the last dump
	conns  int32 // active + inactive at the last dump
	fwd    packedForward
	// draining is when it left the desired state, as time since the
	// applier's epoch (monotonic); 0 if it has not.
	draining time.Duration
}

// find returns where addr is (or would be) in e.dests.
func (e *entry) find(addr netip.AddrPort) (int, bool) {
	return slices.BinarySearchFunc(e.dests, addr, func(d destState, a netip.AddrPort) int { return d.addr.Compare(a) })
}

// New returns an Applier for k that records ownership in ledger.
func New(k Kernel, ledger Ledger) *Applier {
	return &Applier{k: k, ledger: ledger}
}

// fromDesired and Service.Desired convert a virtual server's attributes
// (not its destinations) between the desired state and the kernel's.
func fromDesired(s desired.Service) Service {
	return Service{Key: s.Key, Scheduler: s.Scheduler, Flags: s.Flags, Timeout: s.Timeout, Netmask: s.Netmask}
}

// Desired returns the service's attributes as the desired state has them,
// without destinations.
func (s Service) Desired() desired.Service {
	return desired.Service{Key: s.Key, Scheduler: s.Scheduler, Flags: s.Flags, Timeout: s.Timeout, Netmask: s.Netmask}
}

func sameAttrs(a, b Service) bool {
	return a.Scheduler == b.Scheduler && a.Flags == b.Flags && a.Timeout == b.Timeout && a.Netmask == b.Netmask
}

// Apply makes the kernel hold want. With full it first dumps the kernel and
// repairs any drift; otherwise it trusts what it last wrote. Errors of one
// virtual server do not stop the others; all are returned, joined.
func (a *Applier) Apply(want []desired.Service, full bool) (Result, error) {
	var res Result
	if err := a.loadOwned(); err != nil {
		return res, err
	}
	freshConns := false
	if full || !a.valid {
		a.prev = nil
		if err := a.refresh(a.owned, want); err != nil {
			return res, err
		}
		res.Dumps++
		freshConns = true
	}
	if a.prev != nil && sameKeys(a.prev, want) {
		// The common requested sync: the same virtual servers, some
		// destinations changed. Only those are visited.
		return a.applyChanged(want)
	}
	next, err := a.claim(want)
	if err != nil {
		return res, err
	}
	stored := maps.Clone(next)

	var errs []error
	note := a.noter(&res, &errs)
	wanted := a.applyWanted(want, freshConns, &res, &errs, note)
	a.deleteUnwanted(wanted, next, &res, note)
	a.forgetGone(next, stored, wanted, &errs)
	a.remember(want, errs)
	return res, errors.Join(errs...)
}

// loadOwned reads the ledger, once per process.
func (a *Applier) loadOwned() error {
	if a.owned != nil {
		return nil
	}
	owned, err := a.ledger.Owned()
	if err != nil {
		return fmt.Errorf("reading owned IPVS services: %w", err)
	}
	a.owned = owned
	return nil
}

// claim records the wanted virtual servers as owned before anything is
// created, so that a crash between the two can leave nothing lbd would not
// later remove. It returns what lbd now owns, a map of its own.
func (a *Applier) claim(want []desired.Service) (map[lvs.Key]bool, error) {
	owned := a.owned
	next := make(map[lvs.Key]bool, len(owned)+len(want))
	maps.Copy(next, owned)
	clear(a.fresh)
	for _, s := range want {
		if !next[s.Key] && !a.foreign[s.Key] {
			next[s.Key] = true
			if a.fresh == nil {
				a.fresh = map[lvs.Key]bool{}
			}
			a.fresh[s.Key] = true
		}
	}
	if len(next) != len(owned) {
		if err := a.ledger.SetOwned(next); err != nil {
			return nil, fmt.Errorf("recording owned IPVS services: %w", err)
		}
		a.owned = maps.Clone(next)
	}
	return next, nil
}

// applyWanted creates or brings up to date every wanted virtual server
// with its destinations, adds those it failed for to res.Failed, and
// returns the wanted keys.
func (a *Applier) applyWanted(want []desired.Service, freshConns bool, res *Result, errs *[]error, note noteFunc) map[lvs.Key]bool {
	now := time.Now()
	added := a.addNew(want, res, errs)
	wanted := make(map[lvs.Key]bool, len(want))
	for i := range want {
		s := &want[i]
		wanted[s.Key] = true
		if failed, ok := added[s.Key]; ok {
			if failed {
				res.Failed = append(res.Failed, s.Key)
			}
			continue // created whole, or to be read again
		}
		if a.foreign[s.Key] {
			a.conflicted(s, res, errs)
			continue
		}
		n := len(*errs)
		a.applyService(*s, now, freshConns, res, note)
		if len(*errs) > n {
			res.Failed = append(res.Failed, s.Key)
		}
	}
	return wanted
}

// deleteUnwanted deletes the virtual servers in the kernel that lbd owns
// and no longer wants, listing the destinations of UDP ones in
// res.DeletedUDP.
func (a *Applier) deleteUnwanted(wanted, owned map[lvs.Key]bool, res *Result, note noteFunc) {
	for key, e := range a.cache.all() {
		if wanted[key] || !owned[key] {
			continue
		}
		if !note(a.k.DeleteService(key), "deleting virtual server %s", key) {
			res.Failed = append(res.Failed, key)
			continue
		}
		a.cache.drop(key)
		if key.Protocol == lvs.UDP {
			for _, d := range e.dests {
				res.DeletedUDP = append(res.DeletedUDP, UDPDest{key, d.addr})
			}
		}
	}
}

// forgetGone drops from owned the virtual servers that are neither wanted
// nor in the kernel, and records owned in the ledger when it differs from
// stored, what the ledger holds.
func (a *Applier) forgetGone(owned, stored, wanted map[lvs.Key]bool, errs *[]error) {
	for key := range owned {
		if inKernel := a.cache.get(key) != nil; !wanted[key] && !inKernel || a.foreign[key] {
			delete(owned, key)
		}
	}
	if !maps.Equal(owned, stored) {
		if err := a.ledger.SetOwned(owned); err != nil {
			*errs = append(*errs, fmt.Errorf("recording owned IPVS services: %w", err))
		} else {
			a.owned = owned
		}
	}
}

// remember keeps want as the base of the next requested sync when it was
// applied in full.
func (a *Applier) remember(want []desired.Service, errs []error) {
	a.prev, a.prevEntries = nil, a.prevEntries[:0]
	if len(errs) > 0 || !a.valid {
		return
	}
	for i := range want {
		e := a.cache.get(want[i].Key)
		if e == nil {
			a.prevEntries = a.prevEntries[:0]
			return
		}
		a.prevEntries = append(a.prevEntries, e)
	}
	a.prev = want
}

// applyChanged applies want, which has the same keys in the same order as
// a.prev, visiting only the virtual servers that differ from a.prev or
// still drain destinations.
func (a *Applier) applyChanged(want []desired.Service) (Result, error) {
	var res Result
	var errs []error
	note := a.noter(&res, &errs)
	now := time.Now()
	for i := range want {
		s := &want[i]
		if unchanged(&a.prev[i], s) && len(a.prevEntries[i].dests) == len(s.Dests) {
			continue // nothing to write, nothing draining
		}
		n := len(errs)
		if e := a.applyService(*s, now, false, &res, note); e != nil {
			a.prevEntries[i] = e // copied when a snapshot shared it
		}
		if len(errs) > n {
			res.Failed = append(res.Failed, s.Key)
		}
	}
	if len(errs) > 0 || !a.valid {
		a.prev = nil
	} else {
		a.prev = want // same keys: the entries stay
	}
	return res, errors.Join(errs...)
}

// sameKeys reports whether a and b list the same virtual servers in the
// same order.
func sameKeys(a, b []desired.Service) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key {
			return false
		}
	}
	return true
}

// unchanged reports whether b asks the kernel for what a asked.
func unchanged(a, b *desired.Service) bool {
	if a.Scheduler != b.Scheduler || a.Flags != b.Flags || a.Timeout != b.Timeout || a.Netmask != b.Netmask ||
		a.DrainTimeout != b.DrainTimeout || len(a.Dests) != len(b.Dests) {
		return false
	}
	if len(a.Dests) == 0 || &a.Dests[0] == &b.Dests[0] {
		return true // shared: desired.Compute reuses unchanged destinations
	}
	for i := range a.Dests {
		if a.Dests[i].Addr != b.Dests[i].Addr || a.Dests[i].Weight != b.Dests[i].Weight || a.Dests[i].Forward() != b.Dests[i].Forward() {
			return false
		}
	}
	return true
}

// noteFunc counts one kernel write and records its error, located by
// format and args; it reports whether the write worked.
type noteFunc func(err error, format string, args ...any) bool

// noter returns the noteFunc of one Apply: a failed write, unless Refused,
// also makes the cache untrustworthy, so the next Apply dumps.
func (a *Applier) noter(res *Result, errs *[]error) noteFunc {
	return func(err error, format string, args ...any) bool {
		res.Writes++
		if err != nil {
			if !errors.As(err, new(Refused)) {
				a.valid = false
			}
			*errs = append(*errs, fmt.Errorf(format+": %w", append(args, err)...))
			return false
		}
		return true
	}
}

// location names a virtual server in errors; it formats only when an
// error is built, since Apply visits every virtual server on every sync.
type location struct{ s *desired.Service }

func (l location) String() string {
	return fmt.Sprintf("virtual server %s (service %s at %s)", l.s.Key, l.s.Name, l.s.Source)
}

// applyService brings one virtual server and its destinations up to date
// and returns its cache entry (nil if adding it failed).
func (a *Applier) applyService(s desired.Service, now time.Time, freshConns bool, res *Result, note noteFunc) *entry {
	where := location{&s} // formatted only into an error
	e := a.cache.get(s.Key)
	svc := fromDesired(s)
	switch {
	case e == nil:
		err := a.k.AddService(svc)
		if a.takenAlready(&s, err) {
			err = a.foreignNow(&s)
		}
		if !note(Refusal(err), "adding %s", where) {
			return nil
		}
		e = a.newEntry(svc, len(s.Dests))
		a.cache.put(s.Key, e)
	case !sameAttrs(e.svc, svc):
		if !note(Refusal(a.k.UpdateService(svc)), "updating %s", where) {
			return e
		}
		e = a.writable(s.Key, e)
		e.svc = svc
	}
	e = a.applyDests(e, s, where, note)
	// Every desired destination is now cached (or failed to be added):
	// only a cache larger than the desired list holds some to remove, so
	// the common sync with nothing removed skips this scan.
	if len(e.dests) <= len(s.Dests) {
		return e
	}
	return a.removeDests(e, s, now, freshConns, res, where, note)
}

// applyDests adds the desired destinations e lacks and sets the weights
// that differ; it returns e, copied if it had to change.
func (a *Applier) applyDests(e *entry, s desired.Service, where location, note noteFunc) *entry {
	for _, d := range s.Dests {
		i, found := e.find(d.Addr)
		fwd := d.Forward()
		switch {
		case !found:
			if note(Refusal(a.k.AddDest(s.Key, Dest{Addr: d.Addr, Weight: d.Weight, Forward: fwd})), "adding real server %s (from %s) to %s", d.Addr, d.Source(), where) {
				e = a.writable(s.Key, e)
				e.dests = slices.Insert(e.dests, i, destState{addr: d.Addr, weight: int32(d.Weight), fwd: pack(fwd)})
			}
		case int(e.dests[i].weight) != d.Weight || e.dests[i].fwd != pack(fwd):
			if note(Refusal(a.k.UpdateDest(s.Key, Dest{Addr: d.Addr, Weight: d.Weight, Forward: fwd})), "setting weight %d (%s) of real server %s in %s", d.Weight, fwd, d.Addr, where) {
				e = a.writable(s.Key, e)
				e.dests[i].weight, e.dests[i].fwd, e.dests[i].draining = int32(d.Weight), pack(fwd), 0
			}
		case e.dests[i].draining != 0:
			e = a.writable(s.Key, e)
			e.dests[i].draining = 0 // back in the desired state: drain over
		}
	}
	return e
}

// removeDests drains or deletes the destinations of e that s no longer
// lists: UDP ones and those of a service without drain timeout at once,
// the others after their weight was 0 for the drain timeout (or, at a
// full reconcile, once they hold no connection). It returns e's copy.
func (a *Applier) removeDests(e *entry, s desired.Service, now time.Time, freshConns bool, res *Result, where location, note noteFunc) *entry {
	e = a.writable(s.Key, e)
	if a.epoch.IsZero() {
		a.epoch = now.Add(-1) // draining 0 means "not draining"
	}
	since := now.Sub(a.epoch)
	kept := e.dests[:0] // in place: kept never passes the element read
	for _, ds := range e.dests {
		if _, wanted := slices.BinarySearchFunc(s.Dests, ds.addr, func(d desired.Dest, a netip.AddrPort) int { return d.Addr.Compare(a) }); wanted {
			kept = append(kept, ds)
			continue
		}
		addr := ds.addr
		deleteNow := s.Key.Protocol == lvs.UDP || s.DrainTimeout == 0 ||
			(ds.draining != 0 && (since-ds.draining >= s.DrainTimeout || freshConns && ds.conns == 0))
		if deleteNow {
			if note(a.k.DeleteDest(s.Key, addr), "deleting real server %s from %s", addr, where) {
				if s.Key.Protocol == lvs.UDP {
					res.DeletedUDP = append(res.DeletedUDP, UDPDest{s.Key, addr})
				}
				continue
			}
			kept = append(kept, ds)
			continue
		}
		if ds.weight != 0 {
			if !note(a.k.UpdateDest(s.Key, Dest{Addr: addr, Weight: 0, Forward: ds.fwd.unpack()}), "draining real server %s of %s", addr, where) {
				kept = append(kept, ds)
				continue
			}
			ds.weight = 0
		}
		if ds.draining == 0 {
			ds.draining = since
		}
		res.Draining++
		kept = append(kept, ds)
	}
	clear(e.dests[len(kept):])
	e.dests = kept
	return e
}

// Conns is a destination's connection counts in the kernel.
type Conns struct{ Active, Inactive int }
