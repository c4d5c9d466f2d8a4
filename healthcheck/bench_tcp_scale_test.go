package healthcheck

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// TestScaleTCPOutOfProcess is TestScale with the listener in another
// process (TestCheckerHelperServer), so that the CPU figure is the
// scheduler's and the TCP checker's alone, as on a director whose real
// servers are other machines. The kernel still runs both ends of each
// loopback handshake in this process's connect, so it is an upper bound
// all the same. A measurement, not a test: it runs only with
// LBD_HEALTH_SCALE=1.
//
//	LBD_HEALTH_SCALE=1 go test -run TestScaleTCPOutOfProcess -v ./healthcheck/
func TestScaleTCPOutOfProcess(t *testing.T) {
	if os.Getenv("LBD_HEALTH_SCALE") != "1" {
		t.Skip("set LBD_HEALTH_SCALE=1 to measure")
	}
	const (
		checks   = 10000
		interval = time.Second // 10,000 checks/s
		duration = 10 * time.Second
	)
	addr := scaleTestHelper(t)
	hc := config.HealthCheck{Type: config.CheckTCP, Interval: interval, Timeout: 500 * time.Millisecond, Rise: 2, Fall: 3, InitialHealthy: true}
	var probes []Probe
	for i := range checks {
		// One listener: each (target, definition) differs by its rise.
		c := hc
		c.Rise = 2 + i
		probes = append(probes, Probe{Service: fmt.Sprintf("s%d", i), Addr: addr, Check: c})
	}
	var (
		recorders []*recordingChecker
		mu        sync.Mutex
		failures  = map[string]int{}
	)
	m := New(Options{
		NewChecker: func(c config.HealthCheck) (Checker, error) {
			real, err := NewChecker(c)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			r := &recordingChecker{Checker: real, calls: map[netip.AddrPort][]time.Time{}}
			recorders = append(recorders, r)
			return r, nil
		},
		OnResult: func(_ config.CheckType, _ time.Duration, err error) {
			if err != nil {
				mu.Lock()
				failures[err.Error()]++
				mu.Unlock()
			}
		},
	})
	m.Set(probes, nil)
	runtime.GC()

	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	ctx, cancel := context.WithTimeout(t.Context(), duration)
	running := scaleTestRunningMemory(ctx, duration/2)
	start := time.Now()
	m.Run(ctx)
	cancel()
	elapsed := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	user := time.Duration(ru1.Utime.Nano() - ru0.Utime.Nano())
	sys := time.Duration(ru1.Stime.Nano() - ru0.Stime.Nano())
	cpu := user + sys

	var lateness []time.Duration
	total := 0
	for _, r := range recorders {
		for _, calls := range r.calls {
			total += len(calls)
			for _, c := range calls[1:] {
				d := c.Sub(calls[0]) % interval
				lateness = append(lateness, min(d, interval-d))
			}
		}
	}
	slices.Sort(lateness)
	p := func(q float64) time.Duration { return lateness[int(q*float64(len(lateness)-1))] }
	rate := float64(total) / elapsed.Seconds()
	t.Logf("checks: %d in %v = %.0f checks/s (configured %d/s), failures: %v", total, elapsed.Round(time.Millisecond), rate, checks, failures)
	t.Logf("CPU (checks and scheduler; listener in another process): %v (user %v, system %v) = %.1f%% of one core; per 1,000 checks/s: %.1f%% of one core; %.1f µs a check",
		cpu.Round(time.Millisecond), user.Round(time.Millisecond), sys.Round(time.Millisecond),
		100*cpu.Seconds()/elapsed.Seconds(), 100*cpu.Seconds()/elapsed.Seconds()/(rate/1000), float64(cpu.Microseconds())/float64(total))
	t.Logf("timer error |actual - scheduled|: p50 %v, p99 %v, max %v (interval %v; target p99 <= 10%%)",
		p(0.5), p(0.99), lateness[len(lateness)-1], interval)
	ms := <-running
	t.Logf("memory while running: %.1f MiB heap, %.1f MiB goroutine stacks (%d goroutines)",
		float64(ms.HeapAlloc)/(1<<20), float64(ms.StackInuse)/(1<<20), ms.goroutines)
}

// scaleTestHelper starts TestCheckerHelperServer serving TCP and returns
// its address; checkerTestHelper for a test.
func scaleTestHelper(t *testing.T) netip.AddrPort {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckerHelperServer$")
	cmd.Env = append(os.Environ(), "LBD_HEALTHCHECK_HELPER=tcp")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("helper server: %v", err)
	}
	return netip.MustParseAddrPort(strings.TrimSpace(line))
}
