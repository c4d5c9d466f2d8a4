// Package dataplane turns lbd's desired state into kernel state. The
// Dataplane holds the latest inputs (configuration, discovered real
// servers, health, the box's addresses); on each run of its
// bounded-frequency runner it computes the desired state, lets the safety
// valve decide what may go, and hands the result to one applier per kernel
// subsystem.
package dataplane

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/runner"
	"github.com/lbdproject/lbd/dataplane/valve"
	"github.com/lbdproject/lbd/lvs"
)

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
	// SyncDaemons is how many IPVS connection-sync daemons are wanted;
	// SyncDaemonsErr why they do not all run (nil when they do).
	SyncDaemons    int
	SyncDaemonsErr error
	// Waiting is set when the sync was skipped because not every source
	// has delivered its first snapshot.
	Waiting bool
	// Edition names the configuration the sync applied (Sources.Edition).
	Edition string
	// Held is what the safety valve held back in this sync: what it would
	// have deleted was kept, the rest applied.
	Held valve.Hold
	// Programming is the network-programming latency: from the first input
	// change the sync took up to the end of its kernel writes; 0 when the
	// sync wrote nothing for a change (or failed).
	Programming time.Duration
}

// Sources is what the dataplane is fed from the configuration and
// discovery, delivered together so that no sync sees one without the
// other.
type Sources struct {
	Config *config.Config
	// Edition names Config's content (the hash of its files). A new
	// edition is the admin's edit, whose deletions the safety valve lets
	// through; the same edition with other discovery results is not.
	Edition string
	// Reals holds the real servers discovery found, by lbd service name.
	Reals map[string][]config.RealServer
	// Services are the virtual services discovery defined.
	Services []config.Service
}

// inputs are the latest values of everything outside the dataplane. The
// setters replace them whole and never change them, so a sync can use
// them after letting go of the lock.
type inputs struct {
	src           Sources
	health        map[lvs.HealthKey]bool
	healthVersion uint64 // counts SetHealth calls
	hostAddrs     []netip.Addr
	serving       desired.Serving
	floating      []desired.Floating
	// failoverGen counts the changes of serving and floating (addrGate).
	failoverGen uint64
	// changedAt is when the first input change not synced yet arrived,
	// for the network-programming latency.
	changedAt time.Time
	// restart is the safety valve's baseline for the first sync, handed to
	// the valve by the sync that takes it.
	restart *restartBaseline
}

type restartBaseline struct {
	edition string
	kernel  []desired.Service
}

// Dataplane owns the sync loop. Create it with New, feed it with the Set
// methods, and run Loop.
type Dataplane struct {
	apply appliers
	log   *slog.Logger
	run   *runner.Runner
	// valve is used by the sync goroutine only.
	valve valve.Valve
	// failedOver asks the takeover goroutine to bind the latest failover
	// inputs' addresses (one pending at most).
	failedOver chan struct{}

	mu        sync.Mutex
	in        inputs
	last      SyncResult
	syncStart time.Time
	onSync    []func(SyncResult)
	// computed is the latest desired state computed: the next Compute
	// shares what did not change with it.
	computed *desired.State
	// applied is the state the last sync applied (with what the safety
	// valve held back put back); only the sync goroutine writes it.
	applied *desired.State
	// kernel is the IPVS applier's snapshot of the kernel as its last
	// Apply left it, for status and metrics; only the sync goroutine
	// writes it (publishKernel).
	kernel ipvs.Snapshot
	// takeoverVIPs is what the latest takeover bound (with what was bound
	// before it), until a sync of its inputs (takeoverGen) or newer ones
	// has applied: lbd's own, for ExpectsVIP.
	takeoverVIPs []netip.Addr
	takeoverGen  uint64
	// startKernel is lbd's virtual servers as the kernel held them at a
	// restart, until the first sync that applies logs what it changed
	// against them; the sync goroutine's.
	startKernel []desired.Service
}

// Options configures a Dataplane.
type Options struct {
	IPVS  IPVSApplier
	Addrs AddrApplier
	// The rest is optional.
	Floating  FloatingApplier
	Syncd     SyncApplier
	Timeouts  ipvs.TimeoutSetter
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
	d := &Dataplane{
		apply: appliers{ipvs: opts.IPVS, addrs: opts.Addrs, floating: opts.Floating, syncd: opts.Syncd, sets: opts.Sets,
			filters: opts.Filters, announce: opts.Announce, log: opts.Logger},
		log:        opts.Logger,
		failedOver: make(chan struct{}, 1),
	}
	d.apply.ipvsDone = d.publishKernel
	if opts.Timeouts != nil {
		d.apply.timeouts = ipvs.NewTimeouts(opts.Timeouts)
	}
	if opts.Conntrack != nil {
		d.apply.ct = conntrack.NewQueue(opts.Conntrack)
	}
	d.run = runner.New(d.sync, runner.Options{
		MinInterval: opts.Sync.MinSyncPeriod,
		MaxInterval: opts.Sync.SyncPeriod,
		Burst:       opts.Sync.Burst,
		Logger:      opts.Logger,
	})
	return d
}

// Loop runs syncs, and the takeovers of SetFailover, until ctx is done.
func (d *Dataplane) Loop(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { d.takeovers(ctx) })
	d.run.Loop(ctx)
	wg.Wait()
}

// set changes the inputs under the lock, notes the change and asks for a
// sync.
func (d *Dataplane) set(f func(*inputs)) {
	d.mu.Lock()
	f(&d.in)
	if d.in.changedAt.IsZero() {
		d.in.changedAt = time.Now()
	}
	d.mu.Unlock()
	d.run.Run()
}

// SetSources replaces the configuration and what discovery found at once
// and asks for a sync.
func (d *Dataplane) SetSources(s Sources) {
	d.set(func(in *inputs) { in.src = s })
}

// SetHealth replaces the health results and asks for a sync.
func (d *Dataplane) SetHealth(h map[lvs.HealthKey]bool) {
	d.set(func(in *inputs) {
		in.health = h
		in.healthVersion++
	})
}

// SetHostAddrs replaces the box's own addresses and asks for a sync.
func (d *Dataplane) SetHostAddrs(addrs []netip.Addr) {
	d.set(func(in *inputs) { in.hostAddrs = addrs })
}

// SetServing replaces which VIPs this box serves (binds and announces)
// and asks for a sync. Until it is called every VIP is served.
func (d *Dataplane) SetServing(s desired.Serving) {
	d.set(func(in *inputs) {
		in.serving = s
		in.failoverGen++
	})
}

// SetFailover replaces which VIPs this box serves and the state of the
// floating addresses, together: a VRRP transition moves both.
//
// A box that became master must bind the addresses now (VRRP's own
// timers bound how often): they are bound and announced at once, even
// while a sync is under way, and then the sync runs, ahead of
// min_sync_period (takeovers).
func (d *Dataplane) SetFailover(s desired.Serving, fl []desired.Floating) {
	d.mu.Lock()
	d.in.serving, d.in.floating = s, fl
	d.in.failoverGen++
	if d.in.changedAt.IsZero() {
		d.in.changedAt = time.Now()
	}
	d.mu.Unlock()
	select {
	case d.failedOver <- struct{}{}:
	default: // one pending reads the latest inputs
	}
}

// Release runs one last sync with the latest inputs, in the caller's
// goroutine, after Loop has returned: lbd stops leaving the dataplane in
// place, except what a failover pair must give up (see SetFailover).
func (d *Dataplane) Release(ctx context.Context) error {
	return d.sync(ctx, runner.Release)
}

// SetRestartBaseline gives the safety valve of the first sync what lbd's
// virtual servers held when it started (kernel: their destinations with a
// weight, sorted by key, as ownership.Read returns them) and the edition
// lbd last applied before it stopped: when the first sync applies that
// edition, the files are unchanged, and a source answering short right
// after a restart cannot drain more than max_delete_fraction of those real
// servers either. Call it before the first sync.
func (d *Dataplane) SetRestartBaseline(edition string, kernel []desired.Service) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.in.restart = &restartBaseline{edition: edition, kernel: kernel}
}

// OnSync registers f to be called after every sync (status, metrics,
// readiness). Register before Loop starts.
func (d *Dataplane) OnSync(f func(SyncResult)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onSync = append(d.onSync, f)
}

// Repair asks for a full sync soon, within min_sync_period: the kernel
// told of drift (dataplane/drift). It never blocks, and does not count as
// an input change.
func (d *Dataplane) Repair() { d.run.Repair() }

// ExpectsVIP reports whether lbd's own syncs account for VIP a being bound
// to its interface (bound) or not, for the drift watcher: the state the
// last sync applied says, and while a sync runs, either that or the state
// it applies. Before the first sync everything is expected: that sync
// reconciles anyway.
func (d *Dataplane) ExpectsVIP(a netip.Addr, bound bool) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.applied == nil {
		return true
	}
	has := func(st *desired.State) bool {
		_, ok := slices.BinarySearchFunc(st.VIPs, a, netip.Addr.Compare)
		return ok
	}
	if has(d.applied) == bound {
		return true
	}
	if _, ok := slices.BinarySearchFunc(d.takeoverVIPs, a, netip.Addr.Compare); ok && bound {
		return true
	}
	return !d.syncStart.IsZero() && d.computed != nil && has(d.computed) == bound
}
