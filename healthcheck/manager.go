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

	mu      sync.Mutex
	checks  map[checkID]*check
	queue   checkQueue      // the started checks, by when they are next due
	idle    []*worker       // idle workers, the most recently idle last
	active  bool            // Run is running: Set starts checks
	values  context.Context // Run's context without its cancellation: what checks' contexts hold
	wake    chan struct{}   // tells the scheduler that checks were queued
	running sync.WaitGroup  // the scheduler and the workers
}

// worker runs one check after another, as the scheduler hands them over.
type worker struct {
	work      chan *checkRun // nil: end
	idleSince time.Duration  // on clock()
}

// workerIdle is how long a worker waits for a check before it ends.
const workerIdle = 10 * time.Second

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
	return &Manager{opts: opts, notify: make(chan struct{}, 1), checks: map[checkID]*check{}}
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
	want := map[checkID]*check{}
	defs := map[string]string{} // one copy of each definition
	now := time.Now()
	// seeded holds the new checks' seed, the highest of their real
	// servers': only with a seed (the first Set after a start), since
	// reloads start few checks and need none.
	var seeded map[*check]SeedState
	if len(seed) > 0 {
		seeded = map[*check]SeedState{}
	}
	for _, p := range probes {
		if p.Check.Type == config.CheckNone {
			continue
		}
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
		id := checkID{target: target, def: def}
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
	for c, s := range seeded {
		switch s {
		case SeedServed:
			c.healthy = true
		case SeedHeld:
			c.healthy = false
		}
	}
	for _, c := range want {
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

func (m *Manager) poke() {
	select {
	case m.notify <- struct{}{}:
	default:
	}
}

// start queues the checks that are not queued yet, each due first at its
// offset from now; it reports whether it queued any. m.mu is held.
func (m *Manager) start(checks map[checkID]*check) bool {
	var start []*check
	for _, c := range checks {
		if c.queued {
			continue
		}
		if c.checker == nil {
			ch, err := m.opts.NewChecker(c.hc)
			if err != nil {
				c.lastErr = "cannot check: " + err.Error()
				m.opts.Logger.Error("health check cannot run", "target", c.id.target, "type", c.hc.Type, "error", err)
				continue
			}
			c.checker = ch
			c.offset = offset(c.id, c.hc.Interval)
		}
		start = append(start, c)
	}
	// Now, not before the checkers were made: that can take a while, and
	// the first checks would start late, and stay behind their phase.
	now := clock()
	for _, c := range start {
		c.queued = true
		m.queue.push(queued{due: now + c.offset, c: c})
	}
	return len(start) > 0
}

// slack is how much before its slot a check may start, when the scheduler
// is awake for another one anyway, so that checks due close together start
// on one wakeup: 1/100 of its interval, and never more than maxSlack.
func slack(interval time.Duration) time.Duration {
	return min(interval/slackDivisor, maxSlack)
}

const (
	slackDivisor = 100
	maxSlack     = time.Millisecond
)

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

// stop ends the schedule and cancels the checks in flight with err; their
// results are dropped.
func (m *Manager) stop(err error) {
	m.mu.Lock()
	m.active = false
	for _, q := range m.queue {
		q.c.queued = false
	}
	m.queue = nil
	var canceled []*checkRun
	for _, c := range m.checks {
		if c.run != nil {
			canceled = append(canceled, c.run)
		}
	}
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, r := range canceled {
		r.cancel(err)
	}
	for _, w := range idle {
		w.work <- nil
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

// origin is the zero of clock.
var origin = time.Now()

// clock is the scheduler's monotonic time.
func clock() time.Duration { return time.Since(origin) }

// schedule starts the checks on a fixed schedule: a check is next due a
// whole interval after it was last due, not after it ended, so slow checks
// and a loaded box do not make it slip; a slot that has passed already, or
// that comes while the check of an earlier one still runs, is skipped.
func (m *Manager) schedule(ctx context.Context, wake <-chan struct{}) {
	defer m.running.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	type handoff struct {
		w *worker // nil: a new one
		r *checkRun
	}
	var (
		runs   []handoff
		retire []*worker
	)
	for {
		m.mu.Lock()
		if !m.active {
			m.mu.Unlock()
			return
		}
		now := clock()
		wait := time.Duration(-1)
		for len(m.queue) > 0 {
			q := &m.queue[0]
			c := q.c
			if c.removed {
				c.queued = false
				m.queue.pop()
				continue
			}
			if q.due-slack(c.hc.Interval) > now {
				wait = q.due - now
				break
			}
			interval := c.hc.Interval
			q.due += interval
			if q.due <= now {
				q.due += interval * ((now-q.due)/interval + 1)
			}
			m.queue.down(0)
			if c.run != nil {
				continue
			}
			c.run = &checkRun{c: c, target: Target{Addr: c.id.target, Service: c.service}, values: m.values}
			var w *worker
			if n := len(m.idle); n > 0 {
				w = m.idle[n-1]
				m.idle[n-1] = nil
				m.idle = m.idle[:n-1]
			}
			runs = append(runs, handoff{w, c.run})
		}
		for len(m.idle) > 0 {
			if left := m.idle[0].idleSince + workerIdle - now; left > 0 {
				if wait < 0 || left < wait {
					wait = left
				}
				break
			}
			retire = append(retire, m.idle[0])
			m.idle[0] = nil
			m.idle = m.idle[1:]
		}
		m.mu.Unlock()
		for i, h := range runs {
			if h.w != nil {
				h.w.work <- h.r
			} else {
				m.running.Add(1)
				go m.worker(h.r)
			}
			runs[i] = handoff{}
		}
		runs = runs[:0]
		for i, w := range retire {
			w.work <- nil
			retire[i] = nil
		}
		retire = retire[:0]
		if wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C:
		}
	}
}

// worker runs r, and then the checks the scheduler hands it, until it is
// told to end.
func (m *Manager) worker(r *checkRun) {
	defer m.running.Done()
	w := &worker{work: make(chan *checkRun, 1)}
	for r != nil && m.check(r, w) {
		r = <-w.work
	}
}

// check runs r and records its result, then queues w as idle; it reports
// false when w is to end instead, as Run has.
func (m *Manager) check(r *checkRun, w *worker) bool {
	c := r.c
	start := time.Now()
	r.deadline = start.Add(c.hc.Timeout)
	err := c.checker.Check(r, r.target)
	took := time.Since(start)
	r.cancel(context.Canceled) // as a context's CancelFunc: releases what waits on it
	m.mu.Lock()
	c.run = nil
	if !m.active {
		m.mu.Unlock()
		return false
	}
	w.idleSince = clock()
	m.idle = append(m.idle, w)
	if c.removed {
		m.mu.Unlock()
		return true
	}
	m.record(c, start, took, err)
	m.mu.Unlock()
	if m.opts.OnResult != nil {
		m.opts.OnResult(c.hc.Type, took, err)
	}
	return true
}

// record applies one result: rise consecutive successes make a real
// server healthy, fall consecutive failures unhealthy. m.mu is held.
func (m *Manager) record(c *check, at time.Time, took time.Duration, err error) {
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
	for _, k := range c.keys {
		out = append(out, k.Service)
	}
	return slices.Compact(out) // keys are sorted
}

// checkQueue is a 4-ary min-heap of checks by when they are next due;
// the times are in the heap, not behind its pointers, so that ordering it
// does not walk memory all over.
type checkQueue []queued

type queued struct {
	due time.Duration // the check's next slot, on clock()
	c   *check
}

func (q *checkQueue) push(e queued) {
	*q = append(*q, e)
	q.up(len(*q) - 1)
}

// pop removes the first check.
func (q *checkQueue) pop() {
	last := len(*q) - 1
	(*q)[0] = (*q)[last]
	(*q)[last] = queued{}
	*q = (*q)[:last]
	q.down(0)
}

func (q checkQueue) up(i int) {
	e := q[i]
	for i > 0 {
		p := (i - 1) / 4
		if q[p].due <= e.due {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = e
}

func (q checkQueue) down(i int) {
	if i >= len(q) {
		return
	}
	e := q[i]
	for {
		first := 4*i + 1
		if first >= len(q) {
			break
		}
		j := first
		for k := first + 1; k < first+4 && k < len(q); k++ {
			if q[k].due < q[j].due {
				j = k
			}
		}
		if e.due <= q[j].due {
			break
		}
		q[i] = q[j]
		i = j
	}
	q[i] = e
}

// checkRun is one check in flight, and the context its checker gets: it
// holds the check's deadline and is canceled when the check is removed or
// Run ends. It costs one allocation and, unless the checker waits on Done
// or AfterFunc, no timer: Err compares the deadline with the clock. Values
// are those of Run's context.
type checkRun struct {
	c        *check
	target   Target
	values   context.Context
	deadline time.Time // set before the check starts

	mu    sync.Mutex
	err   error
	done  chan struct{} // made by the first Done
	timer *time.Timer   // fires at the deadline, once something waits for it
	after []*runAfter
}

type runAfter struct{ f func() } // f nil: ran or stopped

func (r *checkRun) Deadline() (time.Time, bool) { return r.deadline, true }

func (r *checkRun) Value(key any) any { return r.values.Value(key) }

func (r *checkRun) String() string { return "healthcheck.checkRun" }

func (r *checkRun) Err() error {
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil || time.Until(r.deadline) > 0 {
		return err
	}
	r.cancel(context.DeadlineExceeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *checkRun) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = make(chan struct{})
		if r.err != nil {
			close(r.done)
		} else {
			r.arm()
		}
	}
	return r.done
}

// AfterFunc makes context.AfterFunc, and contexts made from this one,
// wait for it without a goroutine of their own.
func (r *checkRun) AfterFunc(f func()) (stop func() bool) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &runAfter{f: f}
	r.after = append(r.after, a)
	r.arm()
	r.mu.Unlock()
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		stopped := a.f != nil
		a.f = nil
		return stopped
	}
}

// arm starts the deadline's timer; r.mu is held and r not done.
func (r *checkRun) arm() {
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(r.deadline), func() { r.cancel(context.DeadlineExceeded) })
	}
}

// cancel ends r with err unless it has ended already.
func (r *checkRun) cancel(err error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	if r.done != nil {
		close(r.done)
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	var fs []func()
	for _, a := range r.after {
		if a.f != nil {
			fs = append(fs, a.f)
			a.f = nil
		}
	}
	r.after = nil
	r.mu.Unlock()
	for _, f := range fs {
		go f()
	}
}

// Health returns every checked real server's health.
func (m *Manager) Health() map[lvs.HealthKey]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[lvs.HealthKey]bool{}
	for _, c := range m.checks {
		for _, k := range c.keys {
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
func (m *Manager) ByKey() map[lvs.HealthKey]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[lvs.HealthKey]Status{}
	for _, c := range m.checks {
		st := statusOf(c)
		for _, k := range c.keys {
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
