package healthcheck

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
)

// manualClock is a Clock that moves only when the test moves it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	clock *manualClock
	c     chan time.Time
	when  time.Time
	armed bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) NewTimer(d time.Duration) Timer {
	t := &manualTimer{clock: c, c: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// advance moves the clock by d and fires the timers due by then.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireIfDue()
	}
}

// fireIfDue sends on t's channel if t is due; t.clock.mu is held.
func (t *manualTimer) fireIfDue() {
	if t.armed && !t.when.After(t.clock.now) {
		t.armed = false
		t.c <- t.clock.now // empty: Reset and Stop drain it
	}
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.stop()
	t.when, t.armed = t.clock.now.Add(d), true
	t.fireIfDue()
	return was
}

func (t *manualTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.stop()
}

// stop disarms t and drains its channel, as a *time.Timer's Stop does
// since Go 1.23; t.clock.mu is held.
func (t *manualTimer) stop() bool {
	was := t.armed
	t.armed = false
	select {
	case <-t.c:
	default:
	}
	return was
}

// TestClock: a Manager goes by Options.Clock: checks are due on it, not
// on the system clock, and Status reports its times.
func TestClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := newManualClock()
		t0 := clock.Now()
		f := &fakeChecker{down: map[netip.AddrPort]bool{}, calls: map[netip.AddrPort][]time.Duration{}, start: time.Now()}
		m := New(Options{Clock: clock, NewChecker: func(config.HealthCheck) (Checker, error) { return f, nil }})
		hc := tcpCheck(false) // rise 2
		m.Set([]Probe{{"web", rs1, hc}}, nil)
		if st := m.Status(); len(st) != 1 || !st[0].Since.Equal(t0) {
			t.Fatalf("status %+v; want one check, unhealthy since %v (the clock's now)", st, t0)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { m.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()

		time.Sleep(10 * time.Second) // the system clock moves; Clock does not
		synctest.Wait()
		if n := f.count(rs1); n != 0 {
			t.Fatalf("%d checks while the clock stood still; want none", n)
		}
		first := offset(checkID{rs1, definition(hc)}, hc.Interval)
		if first <= slack(hc.Interval) {
			t.Fatalf("offset %v: the test needs a first slot after the slack", first)
		}
		clock.advance(first - slack(hc.Interval) - time.Nanosecond)
		synctest.Wait()
		if n := f.count(rs1); n != 0 {
			t.Fatalf("%d checks before the first slot's slack; want none", n)
		}
		clock.advance(slack(hc.Interval) + time.Nanosecond)
		synctest.Wait()
		clock.advance(hc.Interval)
		synctest.Wait()
		if n := f.count(rs1); n != 2 {
			t.Fatalf("%d checks at the first two slots; want 2", n)
		}
		second := t0.Add(first + hc.Interval)
		st := m.Status()
		if len(st) != 1 || !st[0].Healthy || !st[0].Since.Equal(second) || !st[0].LastCheck.Equal(second) || st[0].Duration != 0 {
			t.Errorf("status %+v; want healthy since and last checked at %v, for 0s (the clock did not move during the check)", st, second)
		}
	})
}
