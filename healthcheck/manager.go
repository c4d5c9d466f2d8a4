// Package healthcheck checks real servers and reports their health as
// values; it knows nothing of the dataplane. One check runs per (real
// server, check definition), however many services share it; checks are
// spread over their interval, keep a fixed schedule that does not slip with
// check duration, and keep their state across configuration reloads.
package healthcheck

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// Probe asks for one real server of one service to be checked.
type Probe struct {
	Service string
	// Addr is the real server as IPVS knows it; the check goes to
	// Check.Port when set, else to Addr's port.
	Addr  netip.AddrPort
	Check config.HealthCheck
}

// Status is what status pages show of one check.
type Status struct {
	Target    netip.AddrPort
	Type      config.CheckType
	Services  []string
	Healthy   bool
	Since     time.Time // of the current state
	LastCheck time.Time
	LastError string // "" when the last check passed
	Duration  time.Duration
}

// Options configures a Manager.
type Options struct {
	Logger *slog.Logger
	// OnChange receives the complete health map after any real server
	// changes state (and once when Run starts); calls are coalesced and
	// never concurrent.
	OnChange func(map[lvs.HealthKey]bool)
	// NewChecker builds checkers; nil means NewChecker.
	NewChecker func(config.HealthCheck) (Checker, error)
	// OnResult, when set, sees every check's outcome (metrics); it must
	// be cheap and safe for concurrent use.
	OnResult func(typ config.CheckType, took time.Duration, err error)
	// Clock is the time the checks are scheduled and reported by; nil
	// means the system clock.
	Clock Clock
}

// Manager runs the checks.
//
// One scheduler goroutine keeps the checks in a queue ordered by when each
// is next due, sleeps until the first is due and hands every check due by
// then to a worker goroutine of its own, so that a check that waits for a
// slow server holds up no other. Workers outlive their checks and wait for
// the next one, the most recently idle first, so that there are about as
// many as checks run at once; one idle for workerIdle ends. Between its
// checks a check costs nothing but its place in the queue: no goroutine,
// no timer, no context (each check's context is a checkRun, which needs
// no timer unless the checker waits on it).
type Manager struct {
	opts   Options
	notify chan struct{}
	origin time.Time // the zero of clock: when New ran, on opts.Clock

	mu      sync.Mutex
	checks  map[checkID]*check
	queue   checkQueue      // the started checks, by when they are next due
	idle    []*worker       // idle workers, the most recently idle last
	active  bool            // Run is running: Set starts checks
	values  context.Context // Run's context without its cancellation: what checks' contexts hold
	wake    chan struct{}   // tells the scheduler that checks were queued
	running sync.WaitGroup  // the scheduler and the workers
}

type checkID struct {
	target netip.AddrPort
	def    string // the check definition, canonical
}

type check struct {
	id      checkID
	hc      config.HealthCheck
	checker Checker
	keys    []lvs.HealthKey // sorted
	service string          // Target.Service: the first of keys' services by name

	// guarded by Manager.mu
	queued  bool          // in Manager.queue: started
	offset  time.Duration // of its first slot from when it starts
	run     *checkRun     // the check in flight, if any
	removed bool          // no longer configured: leaves the queue when next due; a result in flight is dropped

	healthy             bool
	since               time.Time
	successes, failures int
	lastCheck           time.Time
	lastErr             string
	lastDuration        time.Duration
	panicLogged         time.Time // when a panic of its checker was last logged
	panicsUnlogged      int       // its panics since, not logged
}

// New returns a Manager; nothing runs until Run.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NewChecker == nil {
		opts.NewChecker = NewChecker
	}
	if opts.OnChange == nil {
		opts.OnChange = func(map[lvs.HealthKey]bool) {}
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	return &Manager{opts: opts, notify: make(chan struct{}, 1), origin: opts.Clock.Now(), checks: map[checkID]*check{}}
}

// definition identifies a check's behaviour: two real servers or services
// with equal definitions share one check per target.
func definition(hc config.HealthCheck) string {
	hc.Pos = config.Pos{}
	b, _ := json.Marshal(hc) // plain data: cannot fail
	return string(b)
}

// SeedState is what the kernel held for a real server when lbd started.
// The order matters: a check shared by several real servers takes the
// highest state among them.
type SeedState uint8

const (
	// SeedNone: the kernel does not hold it; its check starts in its
	// initial state.
	SeedNone SeedState = iota
	// SeedHeld: held at weight 0 only, as a failing check leaves it; its
	// check starts unhealthy, so that a restart does not send traffic to
	// it before rise successes. A real server configured with weight 0,
	// or draining, is at weight 0 too and starts unhealthy as well: it
	// needs rise successes to count as healthy, but gets no traffic
	// either way.
	SeedHeld
	// SeedServed: some virtual server sends it traffic (weight > 0); its
	// check starts healthy, so that a restart does not zero its weight
	// while checks warm up.
	SeedServed
)

// Seed says, per real server address, what the kernel held for it when
// lbd started: the state its checks had before a restart, as far as the
// kernel shows it. Addresses absent are SeedNone.
type Seed map[netip.AddrPort]SeedState

// Set replaces the probes. Checks that stay (same target and definition)
// keep their state and schedule; new ones start as seed says (see
// SeedState), else in their initial state.
func (m *Manager) Set(probes []Probe, seed Seed) {
	m.mu.Lock()
	want, seeded := m.checksFor(probes, seed)
	seedChecks(seeded)
	for _, c := range want {
		c.sortKeys()
	}
	canceled := m.remove(want)
	m.checks = want
	if m.active && m.start(want) {
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
	m.mu.Unlock()
	for _, r := range canceled {
		r.cancel(context.Canceled)
	}
	m.poke()
}

// checksFor returns the check of each probe, by id: the one configured
// already for its target and definition, else a new one in its initial
// state; each has the keys of its probes, in the order of probes. m.mu is
// held.
//
// seeded holds the new checks' seed, the highest of their real servers':
// only with a seed (the first Set after a start), since reloads start few
// checks and need none.
func (m *Manager) checksFor(probes []Probe, seed Seed) (want map[checkID]*check, seeded map[*check]SeedState) {
	want = map[checkID]*check{}
	defs := map[string]string{} // one copy of each definition
	now := m.opts.Clock.Now()
	if len(seed) > 0 {
		seeded = map[*check]SeedState{}
	}
	for _, p := range probes {
		if p.Check.Type == config.CheckNone {
			continue
		}
		id := probeID(p, defs)
		c := want[id]
		if c == nil {
			if c = m.checks[id]; c == nil {
				c = &check{id: id, hc: p.Check, healthy: p.Check.InitialHealthy, since: now}
				if seeded != nil {
					seeded[c] = SeedNone
				}
			}
			c.keys = nil
			want[id] = c
		}
		c.keys = append(c.keys, lvs.HealthKey{Service: p.Service, Addr: p.Addr})
		if s, ok := seeded[c]; ok && seed[p.Addr] > s {
			seeded[c] = seed[p.Addr]
		}
	}
	return want, seeded
}

// probeID identifies p's check: its target (the check port when set, else
// the real server's) and its definition, which defs holds one copy of for
// all the checks that share it.
func probeID(p Probe, defs map[string]string) checkID {
	target := p.Addr
	if p.Check.Port != 0 {
		target = netip.AddrPortFrom(p.Addr.Addr(), p.Check.Port)
	}
	def := definition(p.Check)
	if d, ok := defs[def]; ok {
		def = d
	} else {
		defs[def] = def
	}
	return checkID{target: target, def: def}
}

// seedChecks starts new checks in the state their seed says; SeedNone
// leaves them in their initial state.
func seedChecks(seeded map[*check]SeedState) {
	for c, s := range seeded {
		switch s {
		case SeedServed:
			c.healthy = true
		case SeedHeld:
			c.healthy = false
		}
	}
}

// sortKeys sorts c's keys, once each, and names c's service after the
// first.
func (c *check) sortKeys() {
	if len(c.keys) > 1 {
		slices.SortFunc(c.keys, func(a, b lvs.HealthKey) int {
			if c := cmp.Compare(a.Service, b.Service); c != 0 {
				return c
			}
			return a.Addr.Compare(b.Addr)
		})
		c.keys = slices.Compact(c.keys)
	}
	c.service = c.keys[0].Service
}

// remove marks the checks that want leaves out as removed, and returns
// those in flight, for the caller to cancel once it has released m.mu.
// m.mu is held.
func (m *Manager) remove(want map[checkID]*check) []*checkRun {
	var canceled []*checkRun
	for id, c := range m.checks {
		if _, ok := want[id]; ok {
			continue
		}
		c.removed = true
		if c.run != nil {
			canceled = append(canceled, c.run)
		}
	}
	return canceled
}

// poke tells Run that health may have changed, for OnChange; pokes that
// come before Run takes one are coalesced.
func (m *Manager) poke() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// Run runs the checks until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.active = true
	m.values = context.WithoutCancel(ctx)
	m.wake = make(chan struct{}, 1)
	m.start(m.checks)
	m.running.Add(1)
	go m.schedule(ctx, m.wake)
	m.mu.Unlock()
	m.poke()
	for {
		select {
		case <-ctx.Done():
			m.stop(ctx.Err())
			m.running.Wait()
			return
		case <-m.notify:
			m.opts.OnChange(m.Health())
		}
	}
}
