package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/floating"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/lvs"
)

// IPVSApplier is what the dataplane needs of the IPVS applier.
type IPVSApplier interface {
	Apply(want []desired.Service, full bool) (ipvs.Result, error)
}

// AddrApplier is what the dataplane needs of the VIP address applier.
type AddrApplier interface {
	Apply(vips []netip.Addr, full bool) (addrs.Stats, error)
}

// FloatingApplier keeps the failover pair's floating addresses.
type FloatingApplier interface {
	Apply(fl []desired.Floating, full bool) (floating.Stats, error)
}

// SyncApplier keeps the IPVS connection-sync daemons running.
type SyncApplier interface {
	Apply(want []syncd.Daemon) (syncd.Stats, error)
}

// SetApplier keeps lbd's ipsets.
type SetApplier interface {
	Apply(st *desired.State, full bool) (ipset.Stats, error)
}

// FilterApplier keeps one family's iptables rules.
type FilterApplier interface {
	Apply(tables []desired.Table, full bool) (iptables.Stats, error)
}

// Announcer answers ARP for VIPs: it is handed the complete set after
// every sync and does the rest itself.
type Announcer interface {
	Set(vips map[string][]netip.Addr)
	// Standby keeps the sockets of addresses a takeover would announce
	// ready.
	Standby(vips map[string][]netip.Addr)
}

// TimeoutApplier keeps IPVS's global connection timeouts.
type TimeoutApplier interface {
	Apply(t desired.Timeouts, full bool) (ipvs.Stats, error)
}

// ConntrackCleaner removes the conntrack entries of deleted UDP real
// servers.
type ConntrackCleaner = conntrack.Deleter

// appliers hands a desired state to one applier per kernel subsystem. The
// sync and the dry run of `lbd plan --diff` both go through apply, so what
// the dry run prints is what a sync writes.
type appliers struct {
	ipvs     IPVSApplier
	addrs    AddrApplier
	floating FloatingApplier  // nil without failover
	syncd    SyncApplier      // nil without failover
	timeouts TimeoutApplier   // nil without one
	ct       *conntrack.Queue // nil without a cleaner
	sets     SetApplier
	filters  map[int]FilterApplier
	announce Announcer
	// gate orders the address appliers and the announcer between syncs
	// and takeovers (takeover.go).
	gate addrGate
	log  logger
	// ipvsDone, when set, is called as soon as the IPVS applier returns,
	// before the other subsystems are done: the dataplane publishes the
	// kernel's snapshot then, so that status shows the weights as soon as
	// traffic can flow.
	ipvsDone func()
}

// logger is the part of *slog.Logger the appliers use.
type logger interface {
	Info(msg string, args ...any)
}

// outcome is what applying a desired state did.
type outcome struct {
	dumps, writes int
	errs          []error
	// syncDaemons counts the sync daemons wanted; syncErr is why they do
	// not all run (nil when they do).
	syncDaemons int
	syncErr     error
	// addrsSkipped: a takeover of newer failover inputs bound the
	// addresses meanwhile, and this apply left them be.
	addrsSkipped bool
	setEntries   int
	rules        int
	draining     int
	failed       []lvs.Key // sorted, unique
}

// apply makes the kernel hold st (of configuration cfg): with full, every
// applier first reads the kernel and repairs drift. prev is the state the
// last sync applied, nil before the first; gen is the generation of the
// failover inputs st was computed from (see addrGate).
func (a *appliers) apply(st, prev *desired.State, cfg *config.Config, gen uint64, full bool) outcome {
	var timeoutsPart part
	if a.timeouts != nil {
		// The kernel's error says what it was doing with the timeouts.
		ts, err := a.timeouts.Apply(st.Timeouts, full)
		timeoutsPart = part{dumps: ts.Dumps, writes: ts.Writes}
		if err != nil {
			timeoutsPart.errs = []error{err}
		}
	}
	// The subsystems are independent in the kernel (addresses under RTNL,
	// sets and rules under nfnetlink, IPVS under its own mutex): they are
	// applied side by side, so that a cold sync takes about as long as the
	// slowest of them rather than their sum. A new VIP may answer before
	// its masquerade entries exist, as with kube-proxy, which writes IPVS
	// and addresses before its ipsets.
	//
	// A box taking addresses over (a failover) has its virtual servers,
	// sets and rules in place already: it announces the addresses as soon
	// as they are bound, not after the other subsystems. A sync that
	// changes the virtual servers announces after all of them, so that no
	// neighbour is drawn to a VIP before IPVS has its virtual server.
	early := a.announce != nil && prev != nil && sameVirtualServers(prev.Services, st.Services)
	var wg sync.WaitGroup
	var addr addrsApplied
	var filterPart part
	wg.Go(func() { addr = a.applyAddrsGated(st, gen, full, early) })
	wg.Go(func() { filterPart = a.applyFilter(st, cfg, full) })
	ipvsPart, ir := a.applyIPVS(st.Services, full)
	syncPart := a.applySync(st.SyncDaemons)
	wg.Wait()
	// After the addresses are gone: no packet recreates the entries.
	var releasePart part
	if !addr.skipped {
		releasePart = a.releaseConntrack(st, addr.before, addr.known)
	}
	var out outcome
	out.addrsSkipped = addr.skipped
	out.syncDaemons, out.syncErr = len(st.SyncDaemons), errors.Join(syncPart.errs...)
	for _, p := range []part{timeoutsPart, addr.part, filterPart, ipvsPart, syncPart, releasePart} {
		out.dumps += p.dumps
		out.writes += p.writes
		out.errs = append(out.errs, p.errs...)
	}
	out.setEntries, out.rules, out.draining = filterPart.setEntries, filterPart.rules, ir.Draining
	out.failed = slices.Clone(ir.Failed)
	slices.SortFunc(out.failed, lvs.Key.Compare)
	out.failed = slices.Compact(out.failed)
	if a.announce != nil && !early {
		a.announceGated(st, gen)
	}
	if a.announce != nil {
		a.announce.Standby(st.Standby)
	}
	return out
}

// sameVirtualServers reports whether a and b (sorted by key) hold the same
// virtual servers, whatever their destinations.
func sameVirtualServers(a, b []desired.Service) bool {
	return slices.EqualFunc(a, b, func(x, y desired.Service) bool { return x.Key == y.Key })
}

// err joins the outcome's errors; nil when every write went in.
func (o outcome) err() error { return errors.Join(o.errs...) }

// part is what applying one subsystem did.
type part struct {
	dumps, writes     int
	errs              []error
	setEntries, rules int
}

func (p *part) add(dumps, writes int, err error, format string, args ...any) {
	p.dumps += dumps
	p.writes += writes
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf(format+": %w", append(args, err)...))
	}
}

// applyAddrs binds the VIPs on the dummy link, then the floating
// addresses on their links.
func (a *appliers) applyAddrs(st *desired.State, full bool) part {
	var p part
	as, err := a.addrs.Apply(st.VIPs, full)
	p.add(as.Dumps, as.Writes, err, "addresses")
	if a.floating != nil {
		fs, err := a.floating.Apply(st.Floating, full)
		p.add(fs.Dumps, fs.Writes, err, "floating addresses")
	}
	return p
}

// applySync keeps the sync daemons running, after the virtual servers
// (under IPVS's own lock): one dump of two daemons per sync also repairs
// one stopped by hand.
func (a *appliers) applySync(want []syncd.Daemon) part {
	var p part
	if a.syncd == nil {
		return p
	}
	st, err := a.syncd.Apply(want)
	if st.Changed() {
		a.log.Info("IPVS connection-sync daemons changed", "started", fmt.Sprint(st.Started), "stopped", fmt.Sprint(st.Stopped), "restarted", fmt.Sprint(st.Restarted))
	}
	p.add(1, len(st.Started)+len(st.Stopped)+2*len(st.Restarted), err, "IPVS connection sync")
	return p
}

// applyFilter applies the sets, then the rules that match them.
func (a *appliers) applyFilter(st *desired.State, cfg *config.Config, full bool) part {
	var p part
	if a.sets != nil {
		ss, err := a.sets.Apply(st, full)
		p.add(ss.Dumps, ss.Writes, err, "ipsets")
		p.setEntries = ss.Entries
	}
	for _, fam := range []int{4, 6} {
		f, ok := a.filters[fam]
		if !ok {
			continue
		}
		fs, err := f.Apply(desired.TablesFor(cfg, fam), full)
		p.add(fs.Dumps, fs.Writes, err, "%s", desired.FilterTool(fam))
		p.rules += fs.Rules
	}
	return p
}

// applyIPVS applies the virtual servers, then removes the conntrack
// entries of deleted UDP real servers.
func (a *appliers) applyIPVS(services []desired.Service, full bool) (part, ipvs.Result) {
	var p part
	ir, err := a.ipvs.Apply(services, full)
	if a.ipvsDone != nil {
		a.ipvsDone()
	}
	p.add(ir.Dumps, ir.Writes, err, "ipvs")
	if a.ct == nil {
		return p, ir
	}
	flows := make([]conntrack.Flow, 0, len(ir.DeletedUDP))
	for _, u := range ir.DeletedUDP {
		flows = append(flows, conntrack.Flow{VIP: netip.AddrPortFrom(u.Service.Addr, u.Service.Port), Real: u.Real})
	}
	pending := a.ct.Pending() + len(flows)
	cleaned, n, ran, err := a.ct.Clean(flows)
	if !ran {
		return p, ir
	}
	p.writes++
	if err != nil {
		// Kept in the queue for the retry this error brings.
		p.errs = append(p.errs, fmt.Errorf("conntrack entries of %d deleted UDP real servers: %w", pending, err))
		return p, ir
	}
	a.log.Info("removed conntrack entries of deleted UDP real servers", "real_servers", cleaned, "entries", n)
	return p, ir
}

// releaseConntrack removes the conntrack entries of the VIPs this box
// stopped serving (see package conntrack for the resets they cause when it
// serves them again), with those a failed pass left. was is what was
// bound before, when known.
func (a *appliers) releaseConntrack(st *desired.State, was []netip.Addr, known bool) part {
	var p part
	if a.ct == nil {
		return p
	}
	released := releasedVIPs(st, was, known)
	pending := a.ct.PendingReleased() + len(released)
	serves := func(v netip.Addr) bool {
		_, ok := slices.BinarySearchFunc(st.VIPs, v, netip.Addr.Compare)
		return ok
	}
	cleaned, n, ran, err := a.ct.Release(released, serves)
	if !ran {
		return p
	}
	p.writes++
	if err != nil {
		// Kept in the queue for the retry this error brings.
		p.errs = append(p.errs, fmt.Errorf("conntrack entries of %d VIPs no longer served: %w", pending, err))
		return p
	}
	a.log.Info("removed conntrack entries of VIPs no longer served", "vips", cleaned, "entries", n)
	return p
}

// releasedVIPs returns the VIPs bound before (was) that st does not
// serve. Before the first sync (!known) they are every VIP of st's
// virtual servers that st does not serve: the lbd before a restart may
// have served them.
func releasedVIPs(st *desired.State, was []netip.Addr, known bool) []netip.Addr {
	if !known {
		for _, vs := range st.Services {
			if !vs.NodePort && !vs.Key.IsFWMark() {
				was = append(was, vs.Key.Addr)
			}
		}
		slices.SortFunc(was, netip.Addr.Compare)
		was = slices.Compact(was)
	}
	var out []netip.Addr
	for _, v := range was {
		if _, ok := slices.BinarySearchFunc(st.VIPs, v, netip.Addr.Compare); !ok {
			out = append(out, v)
		}
	}
	return out
}
