// Package fakeipvs is a strict in-memory IPVS table for tests of code that
// drives IPVS: it refuses what the kernel refuses (adding what exists,
// changing or deleting what does not) and counts every call.
package fakeipvs

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// Kernel is the fake IPVS table. The zero value is empty and ready. It is
// safe for concurrent use, as tests drift it while a sync loop runs.
type Kernel struct {
	mu       sync.Mutex
	services map[lvs.Key]*ipvs.Service
	// Dumps and Writes count calls; Fail, when set, makes the next write
	// for that key fail with it (once).
	Dumps, Writes int
	Fail          map[lvs.Key]error
}

var _ ipvs.Kernel = (*Kernel)(nil)

func (k *Kernel) svc(key lvs.Key) (*ipvs.Service, error) {
	if err := k.Fail[key]; err != nil {
		delete(k.Fail, key)
		return nil, err
	}
	s := k.services[key]
	if s == nil {
		return nil, fmt.Errorf("virtual server %s: %w", key, syscall.ESRCH)
	}
	return s, nil
}

// Dump returns a deep copy of the table.
func (k *Kernel) Dump() ([]ipvs.Service, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Dumps++
	var out []ipvs.Service
	for _, s := range k.services {
		c := *s
		c.Dests = slices.Clone(s.Dests)
		out = append(out, c)
	}
	return out, nil
}

func (k *Kernel) AddService(s ipvs.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if err := k.Fail[s.Key]; err != nil {
		delete(k.Fail, s.Key)
		return err
	}
	if k.services == nil {
		k.services = map[lvs.Key]*ipvs.Service{}
	}
	if _, ok := k.services[s.Key]; ok {
		return fmt.Errorf("virtual server %s: %w", s.Key, syscall.EEXIST)
	}
	s.Dests = nil
	k.services[s.Key] = &s
	return nil
}

func (k *Kernel) UpdateService(s ipvs.Service) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	old, err := k.svc(s.Key)
	if err != nil {
		return err
	}
	s.Dests = old.Dests
	*old = s
	return nil
}

func (k *Kernel) DeleteService(key lvs.Key) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if _, err := k.svc(key); err != nil {
		return err
	}
	delete(k.services, key)
	return nil
}

func (k *Kernel) AddDest(key lvs.Key, d ipvs.Dest) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	s, err := k.svc(key)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(s.Dests, func(o ipvs.Dest) bool { return o.Addr == d.Addr }) {
		return fmt.Errorf("real server %s: %w", d.Addr, syscall.EEXIST)
	}
	s.Dests = append(s.Dests, ipvs.Dest{Addr: d.Addr, Weight: d.Weight, Forward: d.Forward})
	return nil
}

func (k *Kernel) UpdateDest(key lvs.Key, d ipvs.Dest) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, i, err := k.dest(key, d.Addr)
	if err != nil {
		return err
	}
	s.Dests[i].Weight, s.Dests[i].Forward = d.Weight, d.Forward
	return nil
}

func (k *Kernel) DeleteDest(key lvs.Key, addr netip.AddrPort) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, i, err := k.dest(key, addr)
	if err != nil {
		return err
	}
	s.Dests = slices.Delete(s.Dests, i, i+1)
	return nil
}

// dest counts a write and finds a destination, refusing as the kernel
// does when it is missing; k.mu is held.
func (k *Kernel) dest(key lvs.Key, addr netip.AddrPort) (*ipvs.Service, int, error) {
	k.Writes++
	s, err := k.svc(key)
	if err != nil {
		return nil, 0, err
	}
	i := slices.IndexFunc(s.Dests, func(o ipvs.Dest) bool { return o.Addr == addr })
	if i < 0 {
		return nil, 0, fmt.Errorf("real server %s: %w", addr, syscall.ENOENT)
	}
	return s, i, nil
}

// SetConns sets a destination's connection counts, as traffic would.
func (k *Kernel) SetConns(key lvs.Key, addr netip.AddrPort, active, inactive int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range k.services[key].Dests {
		if k.services[key].Dests[i].Addr == addr {
			k.services[key].Dests[i].ActiveConns, k.services[key].Dests[i].InactiveConns = active, inactive
		}
	}
}

// String renders the table sorted, one line per virtual server and
// destination, for golden comparisons.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for _, key := range slices.SortedFunc(maps.Keys(k.services), lvs.Key.Compare) {
		s := k.services[key]
		fmt.Fprintf(&b, "%s %s flags=%#x timeout=%d\n", key, s.Scheduler, s.Flags, s.Timeout)
		dests := slices.Clone(s.Dests)
		slices.SortFunc(dests, func(a, b ipvs.Dest) int { return a.Addr.Compare(b.Addr) })
		for _, d := range dests {
			fmt.Fprintf(&b, "  -> %s w=%d", d.Addr, d.Weight)
			if d.Forward != (lvs.Forward{}) {
				fmt.Fprintf(&b, " %s", d.Forward)
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Counts returns how many dumps and writes the kernel has seen.
func (k *Kernel) Counts() (dumps, writes int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.Dumps, k.Writes
}

// Ledger is an in-memory ipvs.Ledger.
type Ledger struct {
	Keys   map[lvs.Key]bool
	Writes int
}

func (l *Ledger) Owned() (map[lvs.Key]bool, error) {
	return maps.Clone(l.Keys), nil
}

func (l *Ledger) SetOwned(keys map[lvs.Key]bool) error {
	l.Writes++
	l.Keys = maps.Clone(keys)
	return nil
}

// BatchKernel is Kernel with ipvs.BatchAdder: AddServices creates each
// service and then its destinations through the same strict calls.
type BatchKernel struct{ *Kernel }

var _ ipvs.BatchAdder = BatchKernel{}

func (k BatchKernel) AddServices(svcs []ipvs.Service) []error {
	errs := make([]error, len(svcs))
	for i, s := range svcs {
		// As the real batch writer: a service's own refusal leaves
		// nothing of it, and says so.
		if errs[i] = ipvs.Refusal(k.AddService(s)); errs[i] != nil {
			continue
		}
		for _, d := range s.Dests {
			if err := k.AddDest(s.Key, d); err != nil {
				errs[i] = fmt.Errorf("adding real server %s to %s: %w", d.Addr, s.Key, err)
				break
			}
		}
	}
	return errs
}
