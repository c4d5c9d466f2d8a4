package healthcheck

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// fakeChecker fails for the targets in down and records each call's time.
type fakeChecker struct {
	mu    sync.Mutex
	down  map[netip.AddrPort]bool
	calls map[netip.AddrPort][]time.Duration
	start time.Time
	delay time.Duration
}

func (f *fakeChecker) Check(ctx context.Context, t Target) error {
	f.mu.Lock()
	f.calls[t.Addr] = append(f.calls[t.Addr], time.Since(f.start))
	down, delay := f.down[t.Addr], f.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if down {
		return errors.New("connection refused")
	}
	return nil
}

func (f *fakeChecker) set(addr netip.AddrPort, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[addr] = down
}

func (f *fakeChecker) count(addr netip.AddrPort) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls[addr])
}

var (
	rs1 = netip.MustParseAddrPort("10.0.0.1:80")
	rs2 = netip.MustParseAddrPort("10.0.0.2:80")
)

func tcpCheck(initialHealthy bool) config.HealthCheck {
	return config.HealthCheck{Type: config.CheckTCP, Interval: time.Second, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3, InitialHealthy: initialHealthy}
}

// harness runs a Manager over a fake checker inside a synctest bubble.
type harness struct {
	m       *Manager
	f       *fakeChecker
	mu      sync.Mutex
	changes []map[lvs.HealthKey]bool
}

func newHarness(t *testing.T) *harness {
	h := &harness{f: &fakeChecker{down: map[netip.AddrPort]bool{}, calls: map[netip.AddrPort][]time.Duration{}, start: time.Now()}}
	h.m = New(Options{
		NewChecker: func(config.HealthCheck) (Checker, error) { return h.f, nil },
		OnChange: func(m map[lvs.HealthKey]bool) {
			h.mu.Lock()
			h.changes = append(h.changes, maps.Clone(m))
			h.mu.Unlock()
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.m.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

func (h *harness) last() map[lvs.HealthKey]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.changes) == 0 {
		return nil
	}
	return h.changes[len(h.changes)-1]
}

func TestRiseAndFall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.m.Set([]Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}}, nil)
		synctest.Wait()
		if got := h.last(); !got[lvs.HealthKey{Service: "web", Addr: rs1}] || got[lvs.HealthKey{Service: "web", Addr: rs2}] {
			t.Fatalf("initial states %v; want rs1 healthy (initial_state healthy), rs2 not", got)
		}
		time.Sleep(2 * time.Second) // two passing checks each
		synctest.Wait()
		if got := h.last(); !got[lvs.HealthKey{Service: "web", Addr: rs2}] {
			t.Errorf("after rise=2 successes rs2 is still down: %v", got)
		}
		h.f.set(rs1, true)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := h.last(); !got[lvs.HealthKey{Service: "web", Addr: rs1}] {
			t.Errorf("rs1 down after 2 failures; fall is 3")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := h.last(); got[lvs.HealthKey{Service: "web", Addr: rs1}] {
			t.Errorf("rs1 still up after 3 failures")
		}
		st := h.m.Status()
		if len(st) != 2 || st[0].Healthy || st[0].LastError != "connection refused" {
			t.Errorf("status %+v", st)
		}
	})
}

func TestOneCheckPerTargetAndDefinition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		other := tcpCheck(true)
		other.Rise = 5 // a different definition: its own check
		h.m.Set([]Probe{{"a", rs1, tcpCheck(true)}, {"b", rs1, tcpCheck(true)}, {"c", rs1, other}}, nil)
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := h.f.count(rs1); n != 20 {
			t.Errorf("%d checks of rs1 in 10 intervals; want 20 (services a and b share one)", n)
		}
		if got := h.last(); len(got) != 3 {
			t.Errorf("health for %v; want a, b and c", got)
		}
	})
}

func TestReloadKeepsStateAndSeedWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.f.set(rs1, true)
		h.m.Set([]Probe{{"web", rs1, tcpCheck(true)}}, nil)
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// A reload with the same check: still down, no fresh start.
		h.m.Set([]Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}}, Seed{rs2: SeedServed})
		synctest.Wait()
		got := h.last()
		if got[lvs.HealthKey{Service: "web", Addr: rs1}] {
			t.Errorf("a reload reset rs1's state to healthy")
		}
		if !got[lvs.HealthKey{Service: "web", Addr: rs2}] {
			t.Errorf("rs2, served by the kernel at start, should start healthy despite initial_state unhealthy")
		}
		// A changed check definition starts fresh.
		changed := tcpCheck(true)
		changed.Path = "/x"
		h.m.Set([]Probe{{"web", rs1, changed}}, nil)
		synctest.Wait()
		if !h.last()[lvs.HealthKey{Service: "web", Addr: rs1}] {
			t.Errorf("a new check definition kept the old state")
		}
	})
}

func TestSetSeed(t *testing.T) {
	// rs1 and rs3 share one check: the same target (port 8080), the same
	// definition.
	rs3 := netip.MustParseAddrPort("10.0.0.1:443")
	shared := func(initialHealthy bool) config.HealthCheck {
		c := tcpCheck(initialHealthy)
		c.Port = 8080
		return c
	}
	tests := []struct {
		name   string
		before []Probe // Set first without a seed: checks already running
		probes []Probe
		seed   Seed
		want   map[lvs.HealthKey]bool
	}{
		{
			name:   "no seed: initial state",
			probes: []Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): true, hk("web", rs2): false},
		},
		{
			name:   "absent from the seed: initial state",
			probes: []Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}},
			seed:   Seed{netip.MustParseAddrPort("10.0.0.9:80"): SeedHeld},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): true, hk("web", rs2): false},
		},
		{
			name:   "served starts healthy despite initial_state unhealthy",
			probes: []Probe{{"web", rs1, tcpCheck(false)}},
			seed:   Seed{rs1: SeedServed},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): true},
		},
		{
			name:   "held at 0 starts unhealthy despite initial_state healthy",
			probes: []Probe{{"web", rs1, tcpCheck(true)}},
			seed:   Seed{rs1: SeedHeld},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): false},
		},
		{
			name:   "a shared check served for one real server starts healthy",
			probes: []Probe{{"web", rs1, shared(false)}, {"tls", rs3, shared(false)}},
			seed:   Seed{rs1: SeedHeld, rs3: SeedServed},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): true, hk("tls", rs3): true},
		},
		{
			name:   "a shared check held for one real server and unknown for the other starts unhealthy",
			probes: []Probe{{"web", rs1, shared(true)}, {"tls", rs3, shared(true)}},
			seed:   Seed{rs3: SeedHeld},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): false, hk("tls", rs3): false},
		},
		{
			name:   "a running check keeps its state whatever the seed",
			before: []Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}},
			probes: []Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}},
			seed:   Seed{rs1: SeedHeld, rs2: SeedServed},
			want:   map[lvs.HealthKey]bool{hk("web", rs1): true, hk("web", rs2): false},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Without Run, Set starts no check: states are as seeded.
			m := New(Options{})
			if tt.before != nil {
				m.Set(tt.before, nil)
			}
			m.Set(tt.probes, tt.seed)
			if got := m.Health(); !maps.Equal(got, tt.want) {
				t.Errorf("health %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScheduleDoesNotSlip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		h.f.delay = 400 * time.Millisecond // each check takes 40% of the interval
		h.m.Set([]Probe{{"web", rs1, tcpCheck(true)}}, nil)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		h.f.mu.Lock()
		calls := h.f.calls[rs1]
		h.f.mu.Unlock()
		if len(calls) != 20 {
			t.Fatalf("%d checks in 20 intervals; want 20", len(calls))
		}
		first := calls[0]
		for i, c := range calls {
			if want := first + time.Duration(i)*time.Second; c != want {
				t.Errorf("check %d at %v; want %v (no slip)", i, c, want)
			}
		}
		if first >= time.Second {
			t.Errorf("first check at %v; want within the first interval", first)
		}
	})
}

// blockingChecker takes delay whatever ctx says, and counts the checks
// in flight.
type blockingChecker struct {
	fakeChecker
	inFlight, maxInFlight int
}

func (b *blockingChecker) Check(ctx context.Context, t Target) error {
	b.mu.Lock()
	b.calls[t.Addr] = append(b.calls[t.Addr], time.Since(b.start))
	b.inFlight++
	b.maxInFlight = max(b.maxInFlight, b.inFlight)
	b.mu.Unlock()
	time.Sleep(b.delay)
	b.mu.Lock()
	b.inFlight--
	b.mu.Unlock()
	return nil
}

// TestOverrunSkipsSlots: a check that runs past its next slot (a checker
// that ignores its deadline) misses that slot, and keeps its phase.
func TestOverrunSkipsSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &blockingChecker{fakeChecker: fakeChecker{calls: map[netip.AddrPort][]time.Duration{}, start: time.Now(), delay: 1500 * time.Millisecond}}
		m := New(Options{NewChecker: func(config.HealthCheck) (Checker, error) { return b, nil }})
		m.Set([]Probe{{"web", rs1, tcpCheck(true)}}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		m.Run(ctx)
		calls := b.calls[rs1]
		if len(calls) != 5 {
			t.Fatalf("%d checks in 10 intervals of a check that takes 1.5; want 5: %v", len(calls), calls)
		}
		for i, c := range calls {
			if want := calls[0] + time.Duration(2*i)*time.Second; c != want {
				t.Errorf("check %d at %v; want %v (every other slot)", i, c, want)
			}
		}
	})
}

// TestRemovedCheckInFlight: removing a check cancels it if it is running,
// and its result counts nowhere.
func TestRemovedCheckInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeChecker{down: map[netip.AddrPort]bool{}, calls: map[netip.AddrPort][]time.Duration{}, start: time.Now(), delay: 400 * time.Millisecond}
		var results atomic.Int32
		var errs []error
		var mu sync.Mutex
		m := New(Options{
			NewChecker: func(config.HealthCheck) (Checker, error) {
				return checkerFunc(func(ctx context.Context, t Target) error {
					err := f.Check(ctx, t)
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return err
				}), nil
			},
			OnResult: func(config.CheckType, time.Duration, error) { results.Add(1) },
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		m.Set([]Probe{{"web", rs1, tcpCheck(true)}}, nil)
		for f.count(rs1) == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // mid-check
		m.Set(nil, nil)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
			t.Errorf("check errors %v; want one, canceled", errs)
		}
		if n := results.Load(); n != 0 {
			t.Errorf("%d results of a removed check were reported", n)
		}
		if st := m.Status(); len(st) != 0 {
			t.Errorf("status %+v after the check was removed", st)
		}
		time.Sleep(5 * time.Second)
		if n := f.count(rs1); n != 1 {
			t.Errorf("%d checks of a removed check", n)
		}
	})
}

type checkerFunc func(context.Context, Target) error

func (f checkerFunc) Check(ctx context.Context, t Target) error { return f(ctx, t) }

// TestRunEndCancelsChecks: when Run's context ends, the checks in flight
// are canceled and Run returns once they have.
func TestRunEndCancelsChecks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inFlight atomic.Int32
		var canceled atomic.Bool
		var results atomic.Int32
		m := New(Options{
			NewChecker: func(config.HealthCheck) (Checker, error) {
				return checkerFunc(func(ctx context.Context, _ Target) error {
					inFlight.Add(1)
					defer inFlight.Add(-1)
					<-ctx.Done()
					canceled.Store(ctx.Err() == context.Canceled)
					return ctx.Err()
				}), nil
			},
			OnResult: func(config.CheckType, time.Duration, error) { results.Add(1) },
		})
		m.Set([]Probe{{"web", rs1, tcpCheck(true)}}, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		for inFlight.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		cancel()
		<-done
		if d := time.Since(start); d != 0 {
			t.Errorf("Run returned %v after its context ended; want at once", d)
		}
		if inFlight.Load() != 0 || !canceled.Load() {
			t.Errorf("Run returned with %d checks in flight; canceled: %v", inFlight.Load(), canceled.Load())
		}
		if n := results.Load(); n != 0 {
			t.Errorf("%d results of canceled checks were reported", n)
		}
	})
}

// TestManyChecksOnSchedule: slow checks run side by side, each on its own
// schedule; a check starts at most its slack before its slot, never after.
// Workers that are no longer needed end.
func TestManyChecksOnSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 300
		b := &blockingChecker{fakeChecker: fakeChecker{calls: map[netip.AddrPort][]time.Duration{}, start: time.Now(), delay: 300 * time.Millisecond}}
		m := New(Options{NewChecker: func(config.HealthCheck) (Checker, error) { return b, nil }})
		var probes []Probe
		for i := range n {
			probes = append(probes, Probe{"web", netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i)}), 80), tcpCheck(true)})
		}
		m.Set(probes, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		b.mu.Lock()
		slack := time.Second / slackDivisor
		for _, p := range probes {
			calls := b.calls[p.Addr]
			if len(calls) != 10 {
				t.Errorf("%v: %d checks in 10 intervals", p.Addr, len(calls))
				continue
			}
			due := offset(checkID{p.Addr, definition(p.Check)}, time.Second)
			for i, c := range calls {
				slot := due + time.Duration(i)*time.Second
				if c > slot || c < slot-slack {
					t.Errorf("%v: check %d at %v; want within %v before %v", p.Addr, i, c, slack, slot)
				}
			}
		}
		if b.maxInFlight < 50 {
			t.Errorf("at most %d of %d checks that take 30%% of their interval were in flight at once", b.maxInFlight, n)
		}
		b.mu.Unlock()
		m.mu.Lock()
		workers := len(m.idle)
		m.mu.Unlock()
		if workers > 2*b.maxInFlight {
			t.Errorf("%d idle workers for at most %d checks in flight", workers, b.maxInFlight)
		}
		m.Set(nil, nil)
		time.Sleep(workerIdle + 2*time.Second)
		synctest.Wait()
		m.mu.Lock()
		workers = len(m.idle)
		m.mu.Unlock()
		if workers != 0 {
			t.Errorf("%d workers left %v after the last check", workers, workerIdle)
		}
	})
}

// TestCheckerErrorRetried: a check whose checker cannot be made says so in
// its status, and the next Set tries again.
func TestCheckerErrorRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fail atomic.Bool
		fail.Store(true)
		f := &fakeChecker{down: map[netip.AddrPort]bool{}, calls: map[netip.AddrPort][]time.Duration{}, start: time.Now()}
		m := New(Options{NewChecker: func(config.HealthCheck) (Checker, error) {
			if fail.Load() {
				return nil, errors.New("no such thing")
			}
			return f, nil
		}})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		probes := []Probe{{"web", rs1, tcpCheck(true)}}
		m.Set(probes, nil)
		time.Sleep(3 * time.Second)
		if st := m.Status(); len(st) != 1 || st[0].LastError != "cannot check: no such thing" || f.count(rs1) != 0 {
			t.Errorf("status %+v, %d checks; want cannot check, none", st, f.count(rs1))
		}
		fail.Store(false)
		m.Set(probes, nil)
		time.Sleep(3 * time.Second)
		if n := f.count(rs1); n != 3 {
			t.Errorf("%d checks in 3 intervals after the checker could be made; want 3", n)
		}
	})
}

func hk(service string, a netip.AddrPort) lvs.HealthKey {
	return lvs.HealthKey{Service: service, Addr: a}
}
