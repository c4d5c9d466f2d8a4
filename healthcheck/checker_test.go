package healthcheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// checkerTestSlack is how late a check may return after its deadline.
// Generous: the tests assert that checks honour the deadline, not how
// precisely a loaded CI machine schedules them.
const checkerTestSlack = 2 * time.Second

// checkerTestHC is a check of type typ with the configuration's defaults.
func checkerTestHC(typ config.CheckType) config.HealthCheck {
	return config.HealthCheck{
		Type:           typ,
		Interval:       2 * time.Second,
		Timeout:        time.Second,
		Rise:           2,
		Fall:           3,
		InitialHealthy: true,
		Path:           "/",
		ExpectStatus:   []config.StatusRange{{Min: 200, Max: 399}},
		TLSVerify:      true,
		QueryType:      "A",
		ExpectRcode:    "NOERROR",
		User:           "nobody",
	}
}

func checkerTestNew(t testing.TB, hc config.HealthCheck) Checker {
	t.Helper()
	c, err := NewChecker(hc)
	if err != nil {
		t.Fatalf("NewChecker(%+v): %v", hc, err)
	}
	return c
}

// checkerTestRun runs one check with timeout and asserts that it returned
// within the deadline plus checkerTestSlack.
func checkerTestRun(t testing.TB, c Checker, target Target, timeout time.Duration) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	err := c.Check(ctx, target)
	elapsed := time.Since(start)
	if elapsed > timeout+checkerTestSlack {
		t.Errorf("check took %s with a timeout of %s", elapsed, timeout)
	}
	return err, elapsed
}

// checkerTestWant asserts that err is nil when want is empty, and that it
// contains want otherwise.
func checkerTestWant(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("check failed: %v; want healthy", err)
	case want != "" && err == nil:
		t.Errorf("check passed; want an error containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("check failed with %q; want an error containing %q", err, want)
	}
}

// checkerTestClosedPort returns a loopback address where nothing listens
// on network ("tcp" or "udp").
func checkerTestClosedPort(t testing.TB, network string) netip.AddrPort {
	t.Helper()
	var addr net.Addr
	switch network {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = l.Addr()
		l.Close()
	default:
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = c.LocalAddr()
		c.Close()
	}
	return netip.MustParseAddrPort(addr.String())
}

// checkerTestAddr is a listener's address as a netip.AddrPort.
func checkerTestAddr(a net.Addr) netip.AddrPort {
	return netip.MustParseAddrPort(a.String())
}

// checkerTestHasAddr skips t unless a can be bound on this machine.
func checkerTestHasAddr(t testing.TB, a string) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(a, "0"))
	if err != nil {
		t.Skipf("cannot bind %s here: %v", a, err)
	}
	l.Close()
}

func TestNewCheckerErrors(t *testing.T) {
	t.Parallel()
	mod := func(typ config.CheckType, f func(*config.HealthCheck)) config.HealthCheck {
		hc := checkerTestHC(typ)
		f(&hc)
		return hc
	}
	tests := []struct {
		name string
		hc   config.HealthCheck
		want string
	}{
		{"none", checkerTestHC(config.CheckNone), `"none" has no checker`},
		{"empty type", checkerTestHC(""), `"" has no checker`},
		{"unknown type", checkerTestHC("icmp"), `unknown health check type "icmp"`},
		{"http path without slash", mod(config.CheckHTTP, func(hc *config.HealthCheck) { hc.Path = "healthz" }), "not a request path"},
		{"http path with space", mod(config.CheckHTTP, func(hc *config.HealthCheck) { hc.Path = "/a b" }), "not a request path"},
		{"http header injection", mod(config.CheckHTTP, func(hc *config.HealthCheck) { hc.Host = "a\r\nX-Evil: 1" }), "not a valid Host header"},
		{"udp without payload", checkerTestHC(config.CheckUDP), "payload is empty"},
		{"dns without name", checkerTestHC(config.CheckDNS), "query_name is empty"},
		{"dns label too long", mod(config.CheckDNS, func(hc *config.HealthCheck) { hc.QueryName = strings.Repeat("a", 64) + ".test." }), "query_name"},
		{"dns bad type", mod(config.CheckDNS, func(hc *config.HealthCheck) { hc.QueryName = "a.test."; hc.QueryType = "ANY" }), `query_type "ANY"`},
		{"dns bad rcode", mod(config.CheckDNS, func(hc *config.HealthCheck) { hc.QueryName = "a.test."; hc.ExpectRcode = "YXDOMAIN" }), `expect_rcode "YXDOMAIN"`},
		{"exec without command", checkerTestHC(config.CheckExec), "absolute path"},
		{"exec relative command", mod(config.CheckExec, func(hc *config.HealthCheck) { hc.Command = []string{"true"} }), "absolute path"},
		{"exec unknown user", mod(config.CheckExec, func(hc *config.HealthCheck) {
			hc.Command = []string{"/bin/true"}
			hc.User = "lbd-no-such-user"
		}), "lbd-no-such-user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewChecker(tt.hc)
			if err == nil {
				t.Fatalf("NewChecker returned %T, want an error containing %q", c, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewChecker: %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestCheckerInvalidTarget: a target without an address or port is the
// scheduler's bug, reported rather than dialed.
func TestCheckerInvalidTarget(t *testing.T) {
	t.Parallel()
	for _, typ := range []config.CheckType{config.CheckTCP, config.CheckHTTP, config.CheckUDP, config.CheckDNS, config.CheckExec, config.CheckSCTP} {
		hc := checkerTestHC(typ)
		hc.Payload, hc.QueryName, hc.Command = []byte("x"), "a.test.", []string{"/bin/true"}
		c := checkerTestNew(t, hc)
		for _, a := range []netip.AddrPort{{}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)} {
			err, _ := checkerTestRun(t, c, Target{Addr: a}, time.Second)
			checkerTestWant(t, err, "invalid target address")
		}
	}
}

// TestCheckerNoDeadline: a ctx without a deadline gets hc.Timeout, so that
// no check can hang forever.
func TestCheckerNoDeadline(t *testing.T) {
	t.Parallel()
	silent := udpTestServer(t, func([]byte) []byte { return nil })
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload, hc.Timeout = []byte("ping"), 300*time.Millisecond
	c := checkerTestNew(t, hc)
	start := time.Now()
	err := c.Check(context.Background(), Target{Addr: silent})
	if d := time.Since(start); d > hc.Timeout+checkerTestSlack {
		t.Errorf("check took %s with hc.Timeout %s", d, hc.Timeout)
	}
	checkerTestWant(t, err, "wait for reply: timeout after 300ms")
}

// TestCheckerCanceled: a check whose ctx is canceled says so, wrapping
// context.Canceled, so that the scheduler can tell it from a failure.
func TestCheckerCanceled(t *testing.T) {
	t.Parallel()
	silent := udpTestServer(t, func([]byte) []byte { return nil })
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload = []byte("ping")
	c := checkerTestNew(t, hc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := c.Check(ctx, Target{Addr: silent})
	if d := time.Since(start); d > checkerTestSlack {
		t.Errorf("canceled check took %s", d)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled check: %v; want an error wrapping context.Canceled", err)
	}
}

// TestCheckerConcurrent shares one checker of each network type between
// goroutines, as the scheduler does; run with -race.
func TestCheckerConcurrent(t *testing.T) {
	t.Parallel()
	srv := httpTestServer(t)
	l := tcpTestListener(t, "127.0.0.1")
	echo := udpTestServer(t, func(b []byte) []byte { return b })
	dns := dnsTestStart(t)
	type job struct {
		hc     config.HealthCheck
		target netip.AddrPort
	}
	httpHC := checkerTestHC(config.CheckHTTP)
	httpHC.Path, httpHC.ExpectBody = "/ok", "all is ok"
	udpHC := checkerTestHC(config.CheckUDP)
	udpHC.Payload, udpHC.Expect = []byte("ping"), []byte("ping")
	dnsHC := checkerTestHC(config.CheckDNS)
	dnsHC.QueryName, dnsHC.ExpectAnswer = "big.test.", "192.0.2.7"
	jobs := []job{
		{checkerTestHC(config.CheckTCP), l},
		{httpHC, srv},
		{udpHC, echo},
		{dnsHC, dns.addr},
	}
	var wg sync.WaitGroup
	for _, j := range jobs {
		c := checkerTestNew(t, j.hc)
		for range 8 {
			wg.Go(func() {
				for range 20 {
					err, _ := checkerTestRun(t, c, Target{Addr: j.target}, 5*time.Second)
					if err != nil {
						t.Errorf("%s check: %v", j.hc.Type, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
}

// TestCheckerHelperServer is not a test: the benchmarks run the test binary
// again with LBD_HEALTHCHECK_HELPER set, to serve checks from another
// process so that the benchmark's CPU time and allocations are the
// checker's alone. It prints the address and serves until stdin closes.
func TestCheckerHelperServer(t *testing.T) {
	kind := os.Getenv("LBD_HEALTHCHECK_HELPER")
	if kind == "" {
		t.Skip("helper process for the benchmarks")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	switch kind {
	case "tcp":
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	case "http":
		go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "all is ok\n")
		}))
	}
	fmt.Println(l.Addr())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// checkerTestHelper starts TestCheckerHelperServer serving kind and
// returns its address.
func checkerTestHelper(b *testing.B, kind string) netip.AddrPort {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckerHelperServer$")
	cmd.Env = append(os.Environ(), "LBD_HEALTHCHECK_HELPER="+kind)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		b.Fatalf("helper server: %v", err)
	}
	return netip.MustParseAddrPort(strings.TrimSpace(line))
}

// checkerTestBench runs c against target b.N times and reports, besides
// ns/op (the latency of one check) and allocs/op, the CPU time this
// process spent per check: the scheduler's cost per check.
func checkerTestBench(b *testing.B, c Checker, target netip.AddrPort) {
	ctx := context.Background()
	tgt := Target{Addr: target, Service: "bench"}
	// Warm up, and fail early if the server is not there.
	if err := c.Check(ctx, tgt); err != nil {
		b.Fatal(err)
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := c.Check(cctx, tgt); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
