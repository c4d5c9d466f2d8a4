// Package dataplane turns lbd's desired state into kernel state: it keeps
// the latest inputs (configuration, discovered real servers, health), and
// on each run of its bounded-frequency runner computes the desired state
// and hands it to one applier per kernel subsystem.
package dataplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/runner"
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
}

// TimeoutSetter sets IPVS's global connection timeouts.
type TimeoutSetter interface {
	EnsureTimeouts(config.IPVS) (wrote bool, err error)
}

// ConntrackCleaner removes the conntrack entries of deleted UDP real
// servers.
type ConntrackCleaner interface {
	DeleteUDP(flows []conntrack.Flow) (uint, error)
}

// SyncResult describes one sync, for logs, status and metrics.
type SyncResult struct {
	Reason   runner.Reason
	Start    time.Time
	Duration time.Duration
	Err      error
	// Dumps and Writes count kernel reads and writes of all subsystems.
	Dumps, Writes int
	Services      int
	Draining      int
	// FilterRules and SetEntries size the packet filter: the rules do not
	// grow with services, the entries do.
	FilterRules int
	SetEntries  int
	// Failed lists the virtual servers whose kernel writes failed (the
	// others were applied), sorted.
	Failed []lvs.Key
	// Waiting is set when the sync was skipped because not every source
	// has delivered its first snapshot.
	Waiting bool
	// Held says why the safety valve held back the deletions of this
	// sync: what it would have deleted was kept, the rest applied.
	Held string
	// Programming is the network-programming latency: from the first input
	// change the sync took up to the end of its kernel writes; 0 when the
	// sync wrote nothing for a change (or failed).
	Programming time.Duration
}

// Dataplane owns the sync loop. Create it with New, feed it with the Set
// methods, and run Loop.
type Dataplane struct {
	ipvs     IPVSApplier
	addrs    AddrApplier
	timeouts TimeoutSetter
	ct       ConntrackCleaner
	sets     SetApplier
	filters  map[int]FilterApplier
	announce Announcer
	log      *slog.Logger
	run      *runner.Runner

	mu         sync.Mutex
	cfg        *config.Config
	discovered map[string][]config.RealServer
	// discoveredServices are virtual services defined by discovery.
	discoveredServices []config.Service
	health             map[lvs.HealthKey]bool
	healthVersion      uint64 // counts SetHealth calls: the health maps are replaced, never changed
	hostAddrs          []netip.Addr
	last               SyncResult
	syncStart          time.Time
	changedAt          time.Time // first input change not synced yet
	onSync             []func(SyncResult)
	// computed is the latest desired state computed: the next Compute
	// shares what did not change with it.
	computed *desired.State

	// applying is held (a token in it) while the appliers run: views of
	// the IPVS applier's cache (kernel weights, connection counts) are
	// copied from it, when asked, while holding it.
	applying chan struct{}

	// applied is the state the last sync applied (next, with what the
	// safety valve held back put back) and the configuration it came
	// from; only the sync goroutine writes them.
	applied    *desired.State
	appliedCfg *config.Config
	// holdBase is the applied state when the safety valve began holding
	// deletions back: while it holds, deletions are measured against it, so
	// that additions meanwhile do not dilute the share until the held
	// deletions pass. nil when nothing is held.
	holdBase *desired.State
	// restart and restartCfg are what lbd's virtual servers held when it
	// started and the configuration then in force (SetRestartBaseline),
	// for the safety valve of the first sync.
	restart    []desired.Service
	restartCfg *config.Config
	// goodIn holds the inputs of the last sync the safety valve did not
	// hold: what the sources said before an incident, for measuring an
	// edit's sync (editBase).
	goodIn desired.Input
	// timeoutsSet is false after setting the IPVS timeouts failed.
	timeoutsSet bool
	// ctPending holds the flows of deleted UDP real servers whose
	// conntrack entries are still to be removed: the destinations are gone
	// from IPVS, so a failed pass is retried from here, not from a diff.
	ctPending []conntrack.Flow
}

// Options configures a Dataplane.
type Options struct {
	IPVS  IPVSApplier
	Addrs AddrApplier
	// The rest is optional.
	Timeouts  TimeoutSetter
	Conntrack ConntrackCleaner
	Sets      SetApplier
	// Filters holds the iptables applier of each family (4, 6) in use.
	Filters  map[int]FilterApplier
	Announce Announcer
	Logger   *slog.Logger
	// Sync holds the runner's timings; the configuration's [sync] table
	// provides them in the daemon.
	Sync config.Sync
}

// New returns a Dataplane; it syncs nothing until Loop runs and a
// configuration has been set.
func New(opts Options) *Dataplane {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &Dataplane{ipvs: opts.IPVS, addrs: opts.Addrs, timeouts: opts.Timeouts, ct: opts.Conntrack,
		sets: opts.Sets, filters: opts.Filters, announce: opts.Announce, log: opts.Logger,
		applying: make(chan struct{}, 1)}
	d.run = runner.New(d.sync, runner.Options{
		MinInterval: opts.Sync.MinSyncPeriod,
		MaxInterval: opts.Sync.SyncPeriod,
		Burst:       opts.Sync.Burst,
		Logger:      opts.Logger,
	})
	return d
}

// Loop runs syncs until ctx is done.
func (d *Dataplane) Loop(ctx context.Context) { d.run.Loop(ctx) }

// SetConfig replaces the configuration and asks for a sync.
func (d *Dataplane) SetConfig(cfg *config.Config) {
	d.mu.Lock()
	d.cfg = cfg
	d.changed()
	d.mu.Unlock()
	d.run.Run()
}

// SetSources replaces the configuration and what discovery found (real
// servers by service name, virtual services) at once, so no sync sees one
// without the other. A change of discovery alone (the same cfg) is not the
// admin's edit: the safety valve applies to it.
func (d *Dataplane) SetSources(cfg *config.Config, reals map[string][]config.RealServer, services []config.Service) {
	d.mu.Lock()
	d.cfg, d.discovered, d.discoveredServices = cfg, reals, services
	d.changed()
	d.mu.Unlock()
	d.run.Run()
}

// changed notes when the first input change not yet synced arrived, for
// the network-programming latency. Call with d.mu held.
func (d *Dataplane) changed() {
	if d.changedAt.IsZero() {
		d.changedAt = time.Now()
	}
}

// Applied returns the state the last sync applied (with what the safety
// valve held back kept), without computing it again; ok is false before
// the first sync. When that sync failed (SyncResult.Err), the virtual
// servers it names in SyncResult.Failed, and whatever another subsystem's
// error says, may not be in the kernel as described.
func (d *Dataplane) Applied() (st desired.State, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.applied == nil {
		return desired.State{}, false
	}
	return *d.applied, true
}

// AppliedConfig returns the configuration of the last sync; nil before
// the first.
func (d *Dataplane) AppliedConfig() *config.Config {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.appliedCfg
}

// SetRestartBaseline gives the safety valve of the first sync what lbd's
// virtual servers held when it started (kernel: their destinations with a
// weight), when cfg, the configuration the first sync will apply, is the
// one already in force then (its files unchanged since lbd last applied
// them): a source answering short right after a restart (Consul hiding a
// service) then cannot drain more than max_delete_fraction of those real
// servers either. kernel is sorted by key (as ipvs.ReadOwned returns it).
// Call it before the first sync.
func (d *Dataplane) SetRestartBaseline(cfg *config.Config, kernel []desired.Service) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.restart, d.restartCfg = kernel, cfg
}

// restartBase is the valve's baseline after a restart: the kernel's
// virtual servers that the new state still has. Only their real servers
// are guarded: a virtual server the kernel shows carries too little (no
// source ranges, no SNAT mode) to be put back faithfully.
func restartBase(kernel, next []desired.Service) desired.State {
	var base desired.State
	desired.Pair(kernel, next, func(k, n *desired.Service) {
		if k != nil && n != nil {
			base.Services = append(base.Services, *k)
		}
	})
	return base
}

// SyncingSince returns when the running sync started; ok is false between
// syncs. The systemd watchdog stops being fed when a sync hangs.
func (d *Dataplane) SyncingSince() (start time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncStart, !d.syncStart.IsZero()
}

// SetHealth replaces the health results and asks for a sync.
func (d *Dataplane) SetHealth(h map[lvs.HealthKey]bool) {
	d.mu.Lock()
	d.health = h
	d.healthVersion++
	d.changed()
	d.mu.Unlock()
	d.run.Run()
}

// SetHostAddrs replaces the box's own addresses and asks for a sync.
func (d *Dataplane) SetHostAddrs(addrs []netip.Addr) {
	d.mu.Lock()
	d.hostAddrs = addrs
	d.changed()
	d.mu.Unlock()
	d.run.Run()
}

// OnSync registers f to be called after every sync (status, metrics,
// readiness). Register before Loop starts.
func (d *Dataplane) OnSync(f func(SyncResult)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onSync = append(d.onSync, f)
}

// Last returns the result of the latest sync.
func (d *Dataplane) Last() SyncResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// KernelWeigher is implemented by an IPVS applier that can say what the
// kernel holds without reading it.
type KernelWeigher interface {
	KernelWeights() map[lvs.Key]map[netip.AddrPort]int
}

// ConnCounter is implemented by an IPVS applier that keeps the connection
// counts of its last full dump.
type ConnCounter interface {
	KernelConns() map[lvs.Key]map[netip.AddrPort]ipvs.Conns
}

// KernelConns returns the destinations' connection counts as of the last
// full reconcile; nil before one ran, or when a sync runs for longer than
// viewWait.
func (d *Dataplane) KernelConns() map[lvs.Key]map[netip.AddrPort]ipvs.Conns {
	cc, ok := d.ipvs.(ConnCounter)
	if !ok || !d.waitIdle(viewWait) {
		return nil
	}
	defer d.idle()
	return cc.KernelConns()
}

// kernelWeights returns the IPVS applier's view of the kernel's weights,
// copied when asked (status) rather than after every sync; nil when a sync
// runs for longer than viewWait.
func (d *Dataplane) kernelWeights() map[lvs.Key]map[netip.AddrPort]int {
	kw, ok := d.ipvs.(KernelWeigher)
	if !ok || !d.waitIdle(viewWait) {
		return nil
	}
	defer d.idle()
	return kw.KernelWeights()
}

// viewWait bounds how long status waits for a running sync (a cold sync of
// 10,000 services takes tens of seconds; lbd status gives up after 10).
const viewWait = 3 * time.Second

// waitIdle takes the appliers for the caller, waiting at most max for a
// running sync; idle gives them back.
func (d *Dataplane) waitIdle(max time.Duration) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case d.applying <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (d *Dataplane) idle() { <-d.applying }

// View is what status shows of the dataplane.
type View struct {
	Last    SyncResult
	Desired desired.State
	// Kernel holds each destination's weight in the kernel as of the last
	// sync; a missing entry is not in the kernel. It is nil when unknown:
	// before the first sync, or while a long sync runs.
	Kernel map[lvs.Key]map[netip.AddrPort]int
}

// View returns the current desired state, the last sync and the kernel's
// weights as of that sync.
func (d *Dataplane) View() View {
	st, _, _ := d.desired()
	kernel := d.kernelWeights()
	d.mu.Lock()
	defer d.mu.Unlock()
	return View{Last: d.last, Desired: st, Kernel: kernel}
}

// Desired computes the desired state from the current inputs; ok is false
// until a configuration is set.
func (d *Dataplane) Desired() (desired.State, bool) {
	st, _, ok := d.desired()
	return st, ok
}

// desired computes the desired state from the current inputs, and returns
// them (without Prev).
func (d *Dataplane) desired() (desired.State, desired.Input, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cfg == nil {
		return desired.State{}, desired.Input{}, false
	}
	in := desired.Input{Config: d.cfg, Discovered: d.discovered, DiscoveredServices: d.discoveredServices,
		Health: d.health, HealthVersion: d.healthVersion + 1, HostAddrs: d.hostAddrs, Prev: d.computed}
	st := desired.Compute(in)
	in.Prev = nil
	return st, in, true
}

func (d *Dataplane) sync(_ context.Context, why runner.Reason) error {
	res := SyncResult{Reason: why, Start: time.Now()}
	d.mu.Lock()
	d.syncStart = res.Start
	changedAt := d.changedAt
	d.changedAt = time.Time{}
	d.mu.Unlock()
	st, in, ok := d.desired()
	cfg := in.Config
	if !ok {
		// Sources have not all delivered: applying now could delete what a
		// slower source would keep.
		res.Waiting = true
		d.finish(res)
		return nil
	}
	d.mu.Lock()
	d.computed = &st
	d.mu.Unlock()
	d.applying <- struct{}{}
	st, res.Held = d.valve(st, in)
	full := why.Full()
	var errs []error
	if d.timeouts != nil && (full || !d.timeoutsSet || d.appliedCfg == nil || cfg.IPVS != d.appliedCfg.IPVS) {
		wrote, err := d.timeouts.EnsureTimeouts(cfg.IPVS)
		res.Dumps++
		if wrote {
			res.Writes++
		}
		d.timeoutsSet = err == nil // else the next sync tries again
		if err != nil {
			errs = append(errs, err)
		}
	}
	// The subsystems are independent in the kernel (addresses under RTNL,
	// sets and rules under nfnetlink, IPVS under its own mutex): they are
	// applied side by side, so that a cold sync takes about as long as the
	// slowest of them rather than their sum. A new VIP may answer before
	// its masquerade entries exist, as with kube-proxy, which writes IPVS
	// and addresses before its ipsets.
	var wg sync.WaitGroup
	var addrPart, filterPart part
	wg.Go(func() { addrPart = d.applyAddrs(st.VIPs, full) })
	wg.Go(func() { filterPart = d.applyFilter(&st, cfg, full) })
	ipvsPart, ir := d.applyIPVS(st.Services, full)
	wg.Wait()
	for _, p := range []part{addrPart, filterPart, ipvsPart} {
		res.Dumps += p.dumps
		res.Writes += p.writes
		errs = append(errs, p.errs...)
	}
	res.SetEntries, res.FilterRules, res.Draining, res.Failed = filterPart.setEntries, filterPart.rules, ir.Draining, ir.Failed
	slices.SortFunc(res.Failed, lvs.Key.Compare)
	res.Failed = slices.Compact(res.Failed)
	if d.announce != nil {
		d.announce.Set(st.Announce)
	}
	d.idle()
	res.Services = len(st.Services)
	res.Err = errors.Join(errs...)
	if d.applied != nil { // not the first sync
		logChanges(d.log, d.applied.Services, st.Services)
	}
	// Recorded even when a write failed: one virtual server the kernel
	// keeps refusing must not turn every later sync into an "admin edit"
	// that the safety valve lets through, nor freeze what hooks see. A
	// held sync records what it applied, the held deletions included, so
	// they stay held until the admin or the source says otherwise.
	d.mu.Lock() // Applied reads it from other goroutines
	d.applied, d.appliedCfg = &st, cfg
	d.mu.Unlock()
	res.Duration = time.Since(res.Start)
	switch {
	case res.Err == nil && res.Writes > 0 && !changedAt.IsZero():
		res.Programming = time.Since(changedAt)
	case res.Err != nil && !changedAt.IsZero():
		// The retry still owes the change: keep when it arrived.
		d.mu.Lock()
		if d.changedAt.IsZero() || changedAt.Before(d.changedAt) {
			d.changedAt = changedAt
		}
		d.mu.Unlock()
	}
	d.finish(res)
	return res.Err
}

func (d *Dataplane) finish(res SyncResult) {
	d.mu.Lock()
	d.last = res
	d.syncStart = time.Time{}
	hooks := d.onSync
	d.mu.Unlock()
	switch {
	case res.Waiting:
		d.log.Debug("sync skipped: waiting for the first configuration")
	case res.Held != "":
		d.log.Warn("safety valve: deletions held, other changes applied", "reason", res.Held, "writes", res.Writes)
	case res.Err != nil:
		d.log.Error("sync failed", "reason", res.Reason.String(), "writes", res.Writes, "error", res.Err)
	case res.Writes > 0:
		d.log.Info("sync applied", "reason", res.Reason.String(), "writes", res.Writes, "dumps", res.Dumps,
			"virtual_servers", res.Services, "draining", res.Draining, "duration", res.Duration)
	default:
		d.log.Debug("sync: kernel already up to date", "reason", res.Reason.String(), "dumps", res.Dumps, "duration", res.Duration)
	}
	for _, f := range hooks {
		f(res)
	}
}

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

func (d *Dataplane) applyAddrs(vips []netip.Addr, full bool) part {
	var p part
	as, err := d.addrs.Apply(vips, full)
	p.add(as.Dumps, as.Writes, err, "addresses")
	return p
}

// applyFilter applies the sets, then the rules that match them.
func (d *Dataplane) applyFilter(st *desired.State, cfg *config.Config, full bool) part {
	var p part
	if d.sets != nil {
		ss, err := d.sets.Apply(st, full)
		p.add(ss.Dumps, ss.Writes, err, "ipsets")
		p.setEntries = ss.Entries
	}
	for _, fam := range []int{4, 6} {
		f, ok := d.filters[fam]
		if !ok {
			continue
		}
		fs, err := f.Apply(desired.Tables(cfg.Dataplane, fam), full)
		p.add(fs.Dumps, fs.Writes, err, "%s", iptables.Tool(fam))
		p.rules += fs.Rules
	}
	return p
}

// applyIPVS applies the virtual servers, then removes the conntrack
// entries of deleted UDP real servers.
func (d *Dataplane) applyIPVS(services []desired.Service, full bool) (part, ipvs.Result) {
	var p part
	ir, err := d.ipvs.Apply(services, full)
	p.add(ir.Dumps, ir.Writes, err, "ipvs")
	if d.ct == nil {
		return p, ir
	}
	for _, u := range ir.DeletedUDP {
		d.ctPending = append(d.ctPending, conntrack.Flow{VIP: netip.AddrPortFrom(u.Service.Addr, u.Service.Port), Real: u.Real})
	}
	if len(d.ctPending) == 0 {
		return p, ir
	}
	n, err := d.ct.DeleteUDP(d.ctPending)
	p.writes++
	if err != nil {
		// Kept for the retry this error brings.
		p.errs = append(p.errs, fmt.Errorf("conntrack entries of %d deleted UDP real servers: %w", len(d.ctPending), err))
		return p, ir
	}
	d.log.Info("removed conntrack entries of deleted UDP real servers", "real_servers", len(d.ctPending), "entries", n)
	d.ctPending = nil
	return p, ir
}

// valve is the safety valve: a change the admin did not make by editing
// the configuration (discovery answering empty, health failing everywhere)
// may not delete more than max_delete_fraction at once. It returns what to
// apply, next with such deletions put back, and why they were held ("":
// nothing held). Only the sync goroutine calls it.
func (d *Dataplane) valve(next desired.State, in desired.Input) (st desired.State, held string) {
	cfg := in.Config
	defer func() {
		d.restart, d.restartCfg = nil, nil // for the first sync only
		if held == "" {
			d.goodIn = in
		}
	}()
	switch {
	case d.applied == nil && d.restart != nil && cfg == d.restartCfg:
		// The first sync after a restart, with the files unchanged: a
		// source that answers short now is no edit either.
		base := restartBase(d.restart, next.Services)
		return d.hold(base, base, next, cfg.Sync.MaxDeleteFraction)
	case d.applied == nil:
		d.holdBase = nil
		return next, ""
	case cfg != d.appliedCfg:
		// The admin's edit: what it deletes is meant, but only that. When
		// the sync deletes much, or a hold is on, the new configuration
		// with the sources as they answered before any hold tells what the
		// edit alone would keep (a Compute more, for such syncs only).
		if d.holdBase == nil && tooManyDeletes(*d.applied, next, cfg.Sync.MaxDeleteFraction) == "" {
			return next, ""
		}
		var base desired.State
		switch {
		case d.goodIn.Config != nil:
			base = editBase(d.goodIn, in)
		case d.holdBase != nil:
			// Held since the restart: no earlier answer of the sources to
			// compute with, but the kernel's real servers of the services
			// the edit left as they were stay held.
			base = unchangedOnly(*d.holdBase, *d.applied, d.appliedCfg, cfg)
		default:
			return next, ""
		}
		return d.hold(base, base, next, cfg.Sync.MaxDeleteFraction)
	}
	base := *d.applied
	if d.holdBase != nil {
		base = *d.holdBase
	}
	return d.hold(base, *d.applied, next, cfg.Sync.MaxDeleteFraction)
}

// unchangedOnly keeps the virtual servers of base whose service (named by
// applied) is the same in old and cfg.
func unchangedOnly(base, applied desired.State, old, cfg *config.Config) desired.State {
	names := make(map[lvs.Key]string, len(applied.Services))
	for _, s := range applied.Services {
		names[s.Key] = s.Name
	}
	before, after := byName(old), byName(cfg)
	var out desired.State
	for _, s := range base.Services {
		o, n := before[names[s.Key]], after[names[s.Key]]
		if o != nil && n != nil && o.Same(n) {
			out.Services = append(out.Services, s)
		}
	}
	return out
}

// byName indexes cfg's services by name.
func byName(cfg *config.Config) map[string]*config.Service {
	m := make(map[string]*config.Service, len(cfg.Services))
	for i := range cfg.Services {
		m[cfg.Services[i].Name] = &cfg.Services[i]
	}
	return m
}

// editBase is the state the new configuration (in.Config) would give with
// the discovery and health of good, the inputs of the last sync the valve
// did not hold: for the services the edit left as they were, the real
// servers discovery had then; for the others, none (what the edit changed
// is the admin's to delete). Consul-defined virtual services stay when the
// edit changed neither how they are defined nor claimed their name or
// VIP:port.
func editBase(good, in desired.Input) desired.State {
	old, cfg := good.Config, in.Config
	before := byName(old)
	discovered := map[string][]config.RealServer{}
	taken := map[lvs.Key]bool{}
	names := map[string]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		names[s.Name] = true
		for _, v := range s.VIPs {
			taken[lvs.Key{Addr: v, Port: s.Port, Protocol: s.Protocol}] = true
		}
		if o := before[s.Name]; o != nil && o.Same(s) {
			discovered[s.Name] = good.Discovered[s.Name]
		}
	}
	var services []config.Service
	if reflect.DeepEqual(old.Consul.VirtualServices, cfg.Consul.VirtualServices) {
		for _, s := range good.DiscoveredServices {
			claimed := names[s.Name]
			for _, v := range s.VIPs {
				claimed = claimed || taken[lvs.Key{Addr: v, Port: s.Port, Protocol: s.Protocol}]
			}
			if !claimed {
				services = append(services, s)
			}
		}
	}
	return desired.Compute(desired.Input{Config: cfg, Discovered: discovered, DiscoveredServices: services,
		Health: good.Health, HostAddrs: in.HostAddrs})
}

// hold measures next's deletions against base and, when they are too
// many, puts back what next removes from keep. While it holds, base stays
// the measure, so that additions meanwhile cannot dilute the held
// deletions below the limit.
func (d *Dataplane) hold(base, keep, next desired.State, maxFraction float64) (desired.State, string) {
	reason := tooManyDeletes(base, next, maxFraction)
	if reason == "" {
		d.holdBase = nil
		return next, ""
	}
	d.holdBase = &base
	return desired.KeepRemoved(keep, next), reason
}

// tooManyDeletes says why going from applied to next deletes too much, or
// returns "" when it does not. Both lists are sorted by key.
func tooManyDeletes(applied, next desired.State, maxFraction float64) string {
	var svcGone, dests, destGone int
	desired.Pair(applied.Services, next.Services, func(a, n *desired.Service) {
		switch {
		case a == nil:
			return // new: no deletion
		case n == nil:
			svcGone++
			destGone += len(a.Dests)
		default:
			destGone += desired.Gone(a.Dests, n.Dests)
		}
		dests += len(a.Dests)
	})
	check := func(gone, total int, what string) string {
		if total == 0 || float64(gone)/float64(total) <= maxFraction {
			return ""
		}
		return fmt.Sprintf("would delete %d of %d %s at once (max_delete_fraction %g) without a configuration edit", gone, total, what, maxFraction)
	}
	if why := check(svcGone, len(applied.Services), "virtual servers"); why != "" {
		return why
	}
	return check(destGone, dests, "real servers")
}
