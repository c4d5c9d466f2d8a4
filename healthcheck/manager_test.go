package healthcheck

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
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
	changes []map[Key]bool
}

func newHarness(t *testing.T) *harness {
	h := &harness{f: &fakeChecker{down: map[netip.AddrPort]bool{}, calls: map[netip.AddrPort][]time.Duration{}, start: time.Now()}}
	h.m = New(Options{
		NewChecker: func(config.HealthCheck) (Checker, error) { return h.f, nil },
		OnChange: func(m map[Key]bool) {
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

func (h *harness) last() map[Key]bool {
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
		if got := h.last(); !got[Key{"web", rs1}] || got[Key{"web", rs2}] {
			t.Fatalf("initial states %v; want rs1 healthy (initial_state healthy), rs2 not", got)
		}
		time.Sleep(2 * time.Second) // two passing checks each
		synctest.Wait()
		if got := h.last(); !got[Key{"web", rs2}] {
			t.Errorf("after rise=2 successes rs2 is still down: %v", got)
		}
		h.f.set(rs1, true)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := h.last(); !got[Key{"web", rs1}] {
			t.Errorf("rs1 down after 2 failures; fall is 3")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := h.last(); got[Key{"web", rs1}] {
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
		h.m.Set([]Probe{{"web", rs1, tcpCheck(true)}, {"web", rs2, tcpCheck(false)}}, map[netip.AddrPort]bool{rs2: true})
		synctest.Wait()
		got := h.last()
		if got[Key{"web", rs1}] {
			t.Errorf("a reload reset rs1's state to healthy")
		}
		if !got[Key{"web", rs2}] {
			t.Errorf("rs2, served by the kernel at start, should start healthy despite initial_state unhealthy")
		}
		// A changed check definition starts fresh.
		changed := tcpCheck(true)
		changed.Path = "/x"
		h.m.Set([]Probe{{"web", rs1, changed}}, nil)
		synctest.Wait()
		if !h.last()[Key{"web", rs1}] {
			t.Errorf("a new check definition kept the old state")
		}
	})
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
