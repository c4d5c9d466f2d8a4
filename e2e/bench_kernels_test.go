//go:build e2e

package e2e

import (
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// kernelCounts counts kernel calls; the appliers of one sync run side by
// side, so the counters are atomic.
type kernelCounts struct{ reads, writes atomic.Int64 }

type countedIPVS struct {
	k ipvs.Kernel
	n *kernelCounts
}

func (c countedIPVS) Dump() ([]ipvs.Service, error) { c.n.reads.Add(1); return c.k.Dump() }
func (c countedIPVS) AddService(s ipvs.Service) error {
	c.n.writes.Add(1)
	return c.k.AddService(s)
}
func (c countedIPVS) UpdateService(s ipvs.Service) error {
	c.n.writes.Add(1)
	return c.k.UpdateService(s)
}
func (c countedIPVS) DeleteService(k lvs.Key) error {
	c.n.writes.Add(1)
	return c.k.DeleteService(k)
}
func (c countedIPVS) AddDest(k lvs.Key, d ipvs.Dest) error {
	c.n.writes.Add(1)
	return c.k.AddDest(k, d)
}
func (c countedIPVS) UpdateDest(k lvs.Key, d ipvs.Dest) error {
	c.n.writes.Add(1)
	return c.k.UpdateDest(k, d)
}
func (c countedIPVS) DeleteDest(k lvs.Key, a netip.AddrPort) error {
	c.n.writes.Add(1)
	return c.k.DeleteDest(k, a)
}

// AddServices passes the cold path's batch on when the kernel has one, as
// lbd uses it; it counts one write per object either way.
func (c countedIPVS) AddServices(svcs []ipvs.Service) []error {
	for _, s := range svcs {
		c.n.writes.Add(int64(1 + len(s.Dests)))
	}
	if b, ok := c.k.(ipvs.BatchAdder); ok {
		return b.AddServices(svcs)
	}
	errs := make([]error, len(svcs))
	for i, s := range svcs {
		if errs[i] = c.k.AddService(s); errs[i] != nil {
			continue
		}
		for _, d := range s.Dests {
			if errs[i] = c.k.AddDest(s.Key, d); errs[i] != nil {
				break
			}
		}
	}
	return errs
}

type countedAddrs struct {
	k addrs.Kernel
	n *kernelCounts
}

// EnsureLink looks the link up (a read); it also writes when the link is
// missing or down, which only the cold sync meets.
func (c countedAddrs) EnsureLink(name string) error { c.n.reads.Add(1); return c.k.EnsureLink(name) }
func (c countedAddrs) Dump(link string) ([]netip.Addr, map[netip.Addr]string, error) {
	c.n.reads.Add(1)
	return c.k.Dump(link)
}
func (c countedAddrs) Add(link string, a netip.Addr) error {
	c.n.writes.Add(1)
	return c.k.Add(link, a)
}
func (c countedAddrs) Delete(link string, a netip.Addr) error {
	c.n.writes.Add(1)
	return c.k.Delete(link, a)
}

type countedSets struct {
	k ipset.Kernel
	n *kernelCounts
}

func (c countedSets) Dump(set func(string, desired.SetType, int) func(desired.SetEntry)) error {
	c.n.reads.Add(1)
	return c.k.Dump(set)
}
func (c countedSets) Create(s desired.SetSpec) error { c.n.writes.Add(1); return c.k.Create(s) }
func (c countedSets) Destroy(name string) error      { c.n.writes.Add(1); return c.k.Destroy(name) }
func (c countedSets) Add(set string, e desired.SetEntry) error {
	c.n.writes.Add(1)
	return c.k.Add(set, e)
}
func (c countedSets) Del(set string, e desired.SetEntry) error {
	c.n.writes.Add(1)
	return c.k.Del(set, e)
}

// Write hands a batch to the kernel's batched writer, as the applier does
// with the real kernel (without it the applier would write one entry per
// call); each entry counts as a write.
func (c countedSets) Write(ops []ipset.Op) []error {
	c.n.writes.Add(int64(len(ops)))
	return c.k.(ipset.Batcher).Write(ops)
}

type countedRules struct {
	r iptables.Runner
	n *kernelCounts
}

func (c countedRules) Save(table string) (string, error) { c.n.reads.Add(1); return c.r.Save(table) }
func (c countedRules) Restore(input string) error        { c.n.writes.Add(1); return c.r.Restore(input) }

// timedSets and timedRules time the packet filter's appliers (one
// goroutine runs both, sets first).
type timedSets struct {
	a *ipset.Applier
	d *time.Duration
}

func (w timedSets) Apply(st *desired.State, full bool) (ipset.Stats, error) {
	start := time.Now()
	s, err := w.a.Apply(st, full)
	*w.d += time.Since(start)
	return s, err
}

type timedRules struct {
	a *iptables.Applier
	d *time.Duration
}

func (w timedRules) Apply(tables []desired.Table, full bool) (iptables.Stats, error) {
	start := time.Now()
	s, err := w.a.Apply(tables, full)
	*w.d += time.Since(start)
	return s, err
}

type countedTimeouts struct {
	k ipvs.TimeoutSetter
	n *kernelCounts
}

func (c countedTimeouts) EnsureTimeouts(t desired.Timeouts) (bool, error) {
	c.n.reads.Add(1)
	wrote, err := c.k.EnsureTimeouts(t)
	if wrote {
		c.n.writes.Add(1)
	}
	return wrote, err
}

// timedIPVS times the IPVS applier. It forwards Snapshot so that the
// reconciler does the same work as in `lbd run`.
type timedIPVS struct {
	a *ipvs.Applier
	d time.Duration
}

func (w *timedIPVS) Apply(want []desired.Service, full bool) (ipvs.Result, error) {
	start := time.Now()
	r, err := w.a.Apply(want, full)
	w.d += time.Since(start)
	return r, err
}

func (w *timedIPVS) Snapshot() ipvs.Snapshot { return w.a.Snapshot() }

type timedAddrs struct {
	a *addrs.Applier
	d time.Duration
}

func (w *timedAddrs) Apply(vips []netip.Addr, full bool) (addrs.Stats, error) {
	start := time.Now()
	s, err := w.a.Apply(vips, full)
	w.d += time.Since(start)
	return s, err
}

type timedLedger struct {
	l ipvs.Ledger
	d time.Duration
}

func (w *timedLedger) Owned() (map[lvs.Key]bool, error) {
	start := time.Now()
	m, err := w.l.Owned()
	w.d += time.Since(start)
	return m, err
}

func (w *timedLedger) SetOwned(m map[lvs.Key]bool) error {
	start := time.Now()
	err := w.l.SetOwned(m)
	w.d += time.Since(start)
	return err
}
