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
	"hash/fnv"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
)

// Probe asks for one real server of one service to be checked.
type Probe struct {
	Service string
	// Addr is the real server as IPVS knows it; the check goes to
	// Check.Port when set, else to Addr's port.
	Addr  netip.AddrPort
	Check config.HealthCheck
}

// Key identifies a real server of a service, as health results are used.
type Key struct {
	Service string
	Addr    netip.AddrPort
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
	OnChange func(map[Key]bool)
	// NewChecker builds checkers; nil means NewChecker.
	NewChecker func(config.HealthCheck) (Checker, error)
	// OnResult, when set, sees every check's outcome (metrics); it must
	// be cheap and safe for concurrent use.
	OnResult func(typ config.CheckType, took time.Duration, err error)
}

// Manager runs the checks.
type Manager struct {
	opts   Options
	notify chan struct{}

	mu      sync.Mutex
	checks  map[checkID]*check
	runCtx  context.Context // set by Run; nil before
	running sync.WaitGroup
}

type checkID struct {
	target netip.AddrPort
	def    string // the check definition, canonical
}

type check struct {
	id      checkID
	hc      config.HealthCheck
	checker Checker
	keys    map[Key]bool
	cancel  context.CancelFunc

	// guarded by Manager.mu
	healthy             bool
	since               time.Time
	successes, failures int
	lastCheck           time.Time
	lastErr             string
	lastDuration        time.Duration
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
		opts.OnChange = func(map[Key]bool) {}
	}
	return &Manager{opts: opts, notify: make(chan struct{}, 1), checks: map[checkID]*check{}}
}

// definition identifies a check's behaviour: two real servers or services
// with equal definitions share one check per target.
func definition(hc config.HealthCheck) string {
	hc.Pos = config.Pos{}
	b, _ := json.Marshal(hc) // plain data: cannot fail
	return string(b)
}

// Set replaces the probes. Checks that stay (same target and definition)
// keep their state and schedule; new ones start in their initial state,
// or healthy when seed says the kernel already serves the real server
// with a weight (a restart must not zero weights while checks warm up).
func (m *Manager) Set(probes []Probe, seed map[netip.AddrPort]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[checkID]*check{}
	now := time.Now()
	for _, p := range probes {
		if p.Check.Type == config.CheckNone {
			continue
		}
		target := p.Addr
		if p.Check.Port != 0 {
			target = netip.AddrPortFrom(p.Addr.Addr(), p.Check.Port)
		}
		id := checkID{target: target, def: definition(p.Check)}
		c := want[id]
		if c == nil {
			if c = m.checks[id]; c == nil {
				c = &check{id: id, hc: p.Check, healthy: p.Check.InitialHealthy || seed[p.Addr], since: now}
			}
			c.keys = map[Key]bool{}
			want[id] = c
		}
		c.keys[Key{p.Service, p.Addr}] = true
	}
	for id, c := range m.checks {
		if _, ok := want[id]; !ok && c.cancel != nil {
			c.cancel()
		}
	}
	m.checks = want
	if m.runCtx != nil {
		for _, c := range want {
			m.start(c)
		}
	}
	m.poke()
}

func (m *Manager) poke() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// start runs c's loop unless it runs already; m.mu is held.
func (m *Manager) start(c *check) {
	if c.cancel != nil {
		return
	}
	if c.checker == nil {
		ch, err := m.opts.NewChecker(c.hc)
		if err != nil {
			c.lastErr = "cannot check: " + err.Error()
			m.opts.Logger.Error("health check cannot run", "target", c.id.target, "type", c.hc.Type, "error", err)
			return
		}
		c.checker = ch
	}
	ctx, cancel := context.WithCancel(m.runCtx)
	c.cancel = cancel
	m.running.Add(1)
	go func() {
		defer m.running.Done()
		m.loop(ctx, c)
	}()
}

// Run runs the checks until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.runCtx = ctx
	for _, c := range m.checks {
		m.start(c)
	}
	m.mu.Unlock()
	m.poke()
	for {
		select {
		case <-ctx.Done():
			m.running.Wait()
			return
		case <-m.notify:
			m.opts.OnChange(m.Health())
		}
	}
}

// offset spreads checks over their interval, deterministically per check,
// so that many real servers are not all checked at the same instant.
func offset(id checkID, interval time.Duration) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(id.target.String()))
	h.Write([]byte(id.def))
	return time.Duration(h.Sum64() % uint64(interval))
}

// loop checks on a fixed schedule: the next check is due a whole interval
// after the previous one was due, not after it ended, so slow checks and a
// loaded box do not make timers slip; a missed slot is skipped.
func (m *Manager) loop(ctx context.Context, c *check) {
	interval := c.hc.Interval
	next := time.Now().Add(offset(c.id, interval))
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, c.hc.Timeout)
		err := c.checker.Check(cctx, Target{Addr: c.id.target, Service: firstService(c)})
		cancel()
		if ctx.Err() != nil {
			return
		}
		took := time.Since(start)
		if m.opts.OnResult != nil {
			m.opts.OnResult(c.hc.Type, took, err)
		}
		m.record(c, start, took, err)
		next = next.Add(interval)
		if now := time.Now(); !next.After(now) {
			next = next.Add(interval * (now.Sub(next)/interval + 1))
		}
		timer.Reset(time.Until(next))
	}
}

func firstService(c *check) string {
	for k := range c.keys {
		return k.Service
	}
	return ""
}

// record applies one result: rise consecutive successes make a real
// server healthy, fall consecutive failures unhealthy.
func (m *Manager) record(c *check, at time.Time, took time.Duration, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c.lastCheck, c.lastDuration, c.lastErr = at, took, ""
	if err != nil {
		c.lastErr = err.Error()
		c.failures++
		c.successes = 0
	} else {
		c.successes++
		c.failures = 0
	}
	switch {
	case !c.healthy && c.successes >= c.hc.Rise:
		c.healthy, c.since = true, at
		m.opts.Logger.Info("real server up", "target", c.id.target, "check", c.hc.Type, "services", services(c))
	case c.healthy && c.failures >= c.hc.Fall:
		c.healthy, c.since = false, at
		m.opts.Logger.Warn("real server down", "target", c.id.target, "check", c.hc.Type, "services", services(c), "error", c.lastErr)
	default:
		return
	}
	m.poke()
}

func services(c *check) []string {
	var out []string
	for k := range c.keys {
		out = append(out, k.Service)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Health returns every checked real server's health.
func (m *Manager) Health() map[Key]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[Key]bool{}
	for _, c := range m.checks {
		for k := range c.keys {
			out[k] = c.healthy
		}
	}
	return out
}

// Status returns every check's state, sorted by target.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Status
	for _, id := range slices.SortedFunc(maps.Keys(m.checks), func(a, b checkID) int {
		if c := a.target.Compare(b.target); c != 0 {
			return c
		}
		return cmp.Compare(a.def, b.def)
	}) {
		out = append(out, statusOf(m.checks[id]))
	}
	return out
}

// ByKey returns the status of the check of every real server of every
// service, for status pages that list real servers per service.
func (m *Manager) ByKey() map[Key]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[Key]Status{}
	for _, c := range m.checks {
		st := statusOf(c)
		for k := range c.keys {
			out[k] = st
		}
	}
	return out
}

// statusOf describes c; Manager.mu is held.
func statusOf(c *check) Status {
	return Status{
		Target: c.id.target, Type: c.hc.Type, Services: services(c), Healthy: c.healthy, Since: c.since,
		LastCheck: c.lastCheck, LastError: c.lastErr, Duration: c.lastDuration,
	}
}
