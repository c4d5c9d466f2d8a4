package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// recordingChecker wraps a real checker and notes when each target was
// checked, to measure how far checks drift from their schedule.
type recordingChecker struct {
	Checker
	mu    sync.Mutex
	calls map[netip.AddrPort][]time.Time
}

func (r *recordingChecker) Check(ctx context.Context, t Target) error {
	now := time.Now()
	r.mu.Lock()
	r.calls[t.Addr] = append(r.calls[t.Addr], now)
	r.mu.Unlock()
	return r.Checker.Check(ctx, t)
}

// TestScale measures the scheduler with real TCP checks against loopback
// listeners: CPU per 1,000 checks/s, memory per 10,000 configured checks,
// and timer accuracy. It is a measurement, not a test: it runs only with
// LBD_HEALTH_SCALE=1 and prints figures (docs/benchmarks.md).
//
//	LBD_HEALTH_SCALE=1 go test -run TestScale -v ./healthcheck/
func TestScale(t *testing.T) {
	if os.Getenv("LBD_HEALTH_SCALE") != "1" {
		t.Skip("set LBD_HEALTH_SCALE=1 to measure")
	}
	const (
		checks   = 10000
		interval = time.Second // 10,000 checks/s
		duration = 10 * time.Second
		ports    = 100 // listeners; 100 real servers per port
	)
	var addrs []netip.AddrPort
	for range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		addrs = append(addrs, netip.MustParseAddrPort(ln.Addr().String()))
	}
	hc := config.HealthCheck{Type: config.CheckTCP, Interval: interval, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3, InitialHealthy: true}
	var probes []Probe
	for i := range checks {
		a := addrs[i%ports]
		// Distinct services make distinct keys; distinct check ports would
		// need distinct listeners, so each (target, definition) differs by
		// the definition's rise instead.
		c := hc
		c.Rise = 2 + i/ports
		probes = append(probes, Probe{Service: fmt.Sprintf("s%d", i), Addr: a, Check: c})
	}
	var recorders []*recordingChecker
	var mu sync.Mutex
	m := New(Options{NewChecker: func(c config.HealthCheck) (Checker, error) {
		real, err := NewChecker(c)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		r := &recordingChecker{Checker: real, calls: map[netip.AddrPort][]time.Time{}}
		recorders = append(recorders, r)
		return r, nil
	}})

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m.Set(probes, nil)
	runtime.GC()
	runtime.ReadMemStats(&after)

	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	running := scaleTestRunningMemory(ctx, duration/2)
	start := time.Now()
	m.Run(ctx)
	cancel()
	elapsed := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()-ru0.Utime.Nano()) + time.Duration(ru1.Stime.Nano()-ru0.Stime.Nano())

	// Lateness: how far each check started from first + k*interval.
	var lateness []time.Duration
	total := 0
	for _, r := range recorders {
		for _, calls := range r.calls {
			total += len(calls)
			// The phase error against the target's own schedule (its first
			// check + k intervals); a skipped slot does not count twice.
			for _, c := range calls[1:] {
				d := c.Sub(calls[0]) % interval
				lateness = append(lateness, min(d, interval-d))
			}
		}
	}
	slices.Sort(lateness)
	p := func(q float64) time.Duration { return lateness[int(q*float64(len(lateness)-1))] }
	rate := float64(total) / elapsed.Seconds()
	t.Logf("checks: %d in %v = %.0f checks/s (configured %d/s)", total, elapsed.Round(time.Millisecond), rate, checks)
	// The loopback listeners accept and close in this process too, so the
	// CPU figure is an upper bound for the checker side alone.
	t.Logf("CPU (checks + in-process listeners): %v = %.1f%% of one core; per 1,000 checks/s: %.1f%% of one core", cpu.Round(time.Millisecond),
		100*cpu.Seconds()/elapsed.Seconds(), 100*cpu.Seconds()/elapsed.Seconds()/(rate/1000))
	t.Logf("memory for %d configured checks: %.1f MiB heap (%.0f bytes each)", checks,
		float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), float64(after.HeapAlloc-before.HeapAlloc)/checks)
	ms := <-running
	t.Logf("memory while running: %.1f MiB heap, %.1f MiB goroutine stacks (%d goroutines)",
		float64(ms.HeapAlloc)/(1<<20), float64(ms.StackInuse)/(1<<20), ms.goroutines)
	t.Logf("timer error |actual - scheduled|: p50 %v, p99 %v, max %v (interval %v; target p99 <= 10%%)",
		p(0.5), p(0.99), lateness[len(lateness)-1], interval)
}

type scaleTestMemory struct {
	runtime.MemStats
	goroutines int
}

// scaleTestRunningMemory measures the heap and the goroutines' stacks
// after ctx has been running for after: what the checks hold while they
// run, as opposed to configured but not started.
func scaleTestRunningMemory(ctx context.Context, after time.Duration) <-chan scaleTestMemory {
	out := make(chan scaleTestMemory, 1)
	go func() {
		var m scaleTestMemory
		select {
		case <-ctx.Done():
		case <-time.After(after):
		}
		runtime.ReadMemStats(&m.MemStats)
		m.goroutines = runtime.NumGoroutine()
		out <- m
	}()
	return out
}
