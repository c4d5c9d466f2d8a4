package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// tcpTestListener listens on host, accepting and closing connections,
// and returns its address.
func tcpTestListener(t testing.TB, host string) netip.AddrPort {
	t.Helper()
	return checkerTestAddr(tcpTestServe(t, host, func(c net.Conn) { c.Close() }).Addr())
}

// tcpTestServe listens on host and hands every connection to serve, in its
// own goroutine. Cleanup closes the listener.
func tcpTestServe(t testing.TB, host string, serve func(net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return l
}

// tcpTestFullListener returns the address of a listener whose accept queue
// is full, so that the kernel drops new SYNs and connecting hangs: a
// server that never answers, without a firewall rule.
func tcpTestFullListener(t testing.TB) netip.AddrPort {
	t.Helper()
	return tcpTestFullListenerOn(t, "127.0.0.1")
}

// tcpTestFullListenerOn is tcpTestFullListener on host (an IPv4 or IPv6
// address).
func tcpTestFullListenerOn(t testing.TB, host string) netip.AddrPort {
	t.Helper()
	a := netip.MustParseAddr(host)
	var (
		family int
		sa     syscall.Sockaddr
	)
	if a.Is4() {
		family, sa = syscall.AF_INET, &syscall.SockaddrInet4{Addr: a.As4()}
	} else {
		family, sa = syscall.AF_INET6, &syscall.SockaddrInet6{Addr: a.As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err = syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	var addr netip.AddrPort
	switch sa := sa.(type) {
	case *syscall.SockaddrInet4:
		addr = netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *syscall.SockaddrInet6:
		addr = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), uint16(sa.Port))
	}
	// A backlog of 0 queues one connection; fill the queue until a
	// connect hangs.
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr.String(), 200*time.Millisecond)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return addr
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if i == 10 {
			t.Skip("cannot fill a listener's accept queue here")
		}
	}
}

// tcpTestModes are the two ways a TCP check can learn its outcome: at
// once, when the handshake is over by the time connect returns (a server on
// this host), or by waiting through the runtime poller (a remote server).
// Every behaviour must be the same both ways.
func tcpTestModes(hc config.HealthCheck) []struct {
	name string
	c    Checker
} {
	poller := newTCPChecker(hc)
	poller.wait = true
	return []struct {
		name string
		c    Checker
	}{{"immediate", newTCPChecker(hc)}, {"poller", poller}}
}

// tcpTestCanBind reports whether a can be bound on this machine.
func tcpTestCanBind(a string) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(a, "0"))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// tcpTestClosedPort6 returns an address on ::1 where nothing listens.
func tcpTestClosedPort6(t testing.TB) netip.AddrPort {
	t.Helper()
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return checkerTestAddr(l.Addr())
}

func TestTCPCheck(t *testing.T) {
	t.Parallel()
	has6, has2 := tcpTestCanBind("::1"), tcpTestCanBind("127.0.0.2")
	open, closed, full := tcpTestListener(t, "127.0.0.1"), checkerTestClosedPort(t, "tcp"), tcpTestFullListener(t)
	var open6, closed6, full6 netip.AddrPort
	if has6 {
		open6, closed6, full6 = tcpTestListener(t, "::1"), tcpTestClosedPort6(t), tcpTestFullListenerOn(t, "::1")
	}
	notLocal := "203.0.113.77" // TEST-NET-3: on no interface here (checked below)
	tests := []struct {
		name    string
		source  string // hc.SourceAddress; empty for none
		target  netip.AddrPort
		timeout time.Duration
		want    string // "" for healthy; "dialer": the error net.Dialer gives
		is      error  // what the error must wrap, if anything
		needs   string // "6": IPv6 loopback; "127.0.0.2"; "not local": notLocal must not be bindable
	}{
		{name: "open port", target: open, timeout: time.Second},
		{name: "closed port", target: closed, timeout: time.Second, want: "connect: connection refused", is: syscall.ECONNREFUSED},
		{name: "no answer", target: full, timeout: 500 * time.Millisecond, want: "connect: timeout after 500ms"},
		{name: "IPv6 open port", target: open6, timeout: time.Second, needs: "6"},
		{name: "IPv6 closed port", target: closed6, timeout: time.Second, want: "connect: connection refused", is: syscall.ECONNREFUSED, needs: "6"},
		{name: "IPv6 no answer", target: full6, timeout: 300 * time.Millisecond, want: "connect: timeout after 300ms", needs: "6"},
		{name: "IPv4-mapped target", target: netip.AddrPortFrom(netip.AddrFrom16(open.Addr().As16()), open.Port()), timeout: time.Second},
		{name: "source address", source: "127.0.0.2", target: open, timeout: time.Second, needs: "127.0.0.2"},
		{name: "source address, closed port", source: "127.0.0.2", target: closed, timeout: time.Second, want: "connect: connection refused", is: syscall.ECONNREFUSED, needs: "127.0.0.2"},
		{name: "IPv6 source address", source: "::1", target: open6, timeout: time.Second, needs: "6"},
		{name: "IPv4-mapped source address", source: "::ffff:127.0.0.1", target: open, timeout: time.Second},
		// Mixed families fail as they did with net.Dialer (on Linux 6.x,
		// EAFNOSUPPORT and ENETUNREACH).
		{name: "IPv4 source, IPv6 target", source: "127.0.0.1", target: open6, timeout: time.Second, want: "dialer", needs: "6"},
		{name: "IPv6 source, IPv4 target", source: "::1", target: open, timeout: time.Second, want: "dialer", needs: "6"},
		{name: "source address not on this host", source: notLocal, target: open, timeout: time.Second, want: "connect: cannot assign requested address", is: syscall.EADDRNOTAVAIL, needs: "not local"},
	}
	for _, mode := range []bool{false, true} {
		for _, tt := range tests {
			name := tt.name + "/immediate"
			if mode {
				name = tt.name + "/poller"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				switch {
				case tt.needs == "6" && !has6:
					t.Skip("no IPv6 loopback here")
				case tt.needs == "127.0.0.2" && !has2:
					t.Skip("cannot bind 127.0.0.2 here")
				case tt.needs == "not local" && tcpTestCanBind(notLocal):
					t.Skipf("%s is on this host", notLocal)
				}
				hc := checkerTestHC(config.CheckTCP)
				if tt.source != "" {
					hc.SourceAddress = netip.MustParseAddr(tt.source)
				}
				c := newTCPChecker(hc)
				c.wait = mode
				if tt.want == "dialer" {
					d := tcpTestDialer{checkerDialer(), checkerLocal(hc)}
					derr, _ := checkerTestRun(t, d, Target{Addr: tt.target}, tt.timeout)
					if derr == nil {
						t.Fatal("net.Dialer connected")
					}
					tt.want, tt.is = derr.Error(), errors.Unwrap(derr)
				}
				err, elapsed := checkerTestRun(t, c, Target{Addr: tt.target}, tt.timeout)
				checkerTestWant(t, err, tt.want)
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("error %v does not wrap %v", err, tt.is)
				}
				if tt.want != "" && !strings.HasPrefix(err.Error(), tt.want) {
					t.Errorf("error %q; want exactly %q", err, tt.want)
				}
				t.Logf("%v after %s", err, elapsed)
			})
		}
	}
}

// TestTCPCheckSourceAddress: the check connects from source_address.
func TestTCPCheckSourceAddress(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "127.0.0.2")
	from := make(chan netip.Addr, 2)
	l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) {
		from <- checkerTestAddr(c.RemoteAddr()).Addr()
		c.Close()
	})
	hc := checkerTestHC(config.CheckTCP)
	hc.SourceAddress = netip.MustParseAddr("127.0.0.2")
	for _, m := range tcpTestModes(hc) {
		err, _ := checkerTestRun(t, m.c, Target{Addr: checkerTestAddr(l.Addr())}, time.Second)
		checkerTestWant(t, err, "")
		if got := <-from; got != hc.SourceAddress {
			t.Errorf("%s: connection came from %s; want %s", m.name, got, hc.SourceAddress)
		}
	}
}

// TestTCPCheckNoDeadline: a ctx without a deadline gets hc.Timeout.
func TestTCPCheckNoDeadline(t *testing.T) {
	t.Parallel()
	full := tcpTestFullListener(t)
	hc := checkerTestHC(config.CheckTCP)
	hc.Timeout = 300 * time.Millisecond
	for _, m := range tcpTestModes(hc) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := m.c.Check(context.Background(), Target{Addr: full})
			if d := time.Since(start); d > hc.Timeout+checkerTestSlack {
				t.Errorf("check took %s with hc.Timeout %s", d, hc.Timeout)
			}
			checkerTestWant(t, err, "connect: timeout after 300ms")
		})
	}
}

// TestTCPCheckCanceled: canceling ctx ends a hanging connect at once, and
// a ctx canceled before the check starts does not connect at all.
func TestTCPCheckCanceled(t *testing.T) {
	t.Parallel()
	full := tcpTestFullListener(t)
	for _, m := range tcpTestModes(checkerTestHC(config.CheckTCP)) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			err := m.c.Check(ctx, Target{Addr: full})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("canceled check: %v; want an error wrapping context.Canceled", err)
			}
			if d := time.Since(start); d > checkerTestSlack {
				t.Errorf("canceled check took %s", d)
			}

			accepted := make(chan struct{}, 1)
			l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) { accepted <- struct{}{}; c.Close() })
			err = m.c.Check(ctx, Target{Addr: checkerTestAddr(l.Addr())}) // ctx is canceled by now
			if !errors.Is(err, context.Canceled) || err.Error() != "connect: context canceled" {
				t.Errorf("check with a canceled ctx: %v; want connect: context canceled", err)
			}
			select {
			case <-accepted:
				t.Errorf("check with a canceled ctx connected")
			case <-time.After(50 * time.Millisecond):
			}
		})
	}
}

// TestTCPCheckReset: a check closes with a reset, not a FIN, so that no
// socket is left in TIME_WAIT on the director.
func TestTCPCheckReset(t *testing.T) {
	t.Parallel()
	readErr := make(chan error, 1)
	l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	})
	for _, m := range tcpTestModes(checkerTestHC(config.CheckTCP)) {
		err, _ := checkerTestRun(t, m.c, Target{Addr: checkerTestAddr(l.Addr())}, time.Second)
		checkerTestWant(t, err, "")
		if err := <-readErr; !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: server read %v; want ECONNRESET", m.name, err)
		}
	}
}

// TestTCPCheckNoLeaks: checks of every outcome leave no file descriptor
// open and no socket in TIME_WAIT. Not parallel, so that the descriptor
// count is this test's alone.
func TestTCPCheckNoLeaks(t *testing.T) {
	// A listener that never accepts: the handshake completes in the
	// kernel, and no server-side descriptor comes and goes meanwhile.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	open, closed, full := checkerTestAddr(l.Addr()), checkerTestClosedPort(t, "tcp"), tcpTestFullListener(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		return len(ents)
	}
	before := fds()
	for _, m := range tcpTestModes(checkerTestHC(config.CheckTCP)) {
		for range 50 {
			err, _ := checkerTestRun(t, m.c, Target{Addr: open}, time.Second)
			checkerTestWant(t, err, "")
			err, _ = checkerTestRun(t, m.c, Target{Addr: closed}, time.Second)
			checkerTestWant(t, err, "connection refused")
		}
		err, _ := checkerTestRun(t, m.c, Target{Addr: full}, 50*time.Millisecond)
		checkerTestWant(t, err, "timeout")
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		checkerTestWant(t, m.c.Check(ctx, Target{Addr: full}), "context canceled")
	}
	if after := fds(); after != before {
		t.Errorf("%d file descriptors open before the checks, %d after", before, after)
	}
	if n := tcpTestTimeWait(t, open.Port()); n != 0 {
		t.Errorf("%d sockets to or from port %d in TIME_WAIT", n, open.Port())
	}
}

// tcpTestTimeWait counts the IPv4 sockets in TIME_WAIT with port at either end.
func tcpTestTimeWait(t *testing.T, port uint16) int {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skip(err)
	}
	hex := fmt.Sprintf(":%04X", port)
	n := 0
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && f[3] == "06" && (strings.HasSuffix(f[1], hex) || strings.HasSuffix(f[2], hex)) {
			n++
		}
	}
	return n
}

// tcpTestDialer is the TCP check as it was before tcpChecker made its own
// sockets (net.Dialer, as HTTP and DNS over TCP still connect): the
// benchmarks' yardstick.
type tcpTestDialer struct {
	dialer *net.Dialer
	local  netip.AddrPort
}

func (c tcpTestDialer) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, _ := checkerStart(ctx, time.Second)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	conn, err := tcpDial(ctx, c.dialer, c.local, raddr)
	if err != nil {
		return checkerErr(ctx, start, "connect", err)
	}
	tcpClose(conn)
	return nil
}

// BenchmarkTCPCheck: a check of a server on this host, which accepts (in
// another process, so that the CPU time is the checker's alone).
func BenchmarkTCPCheck(b *testing.B) {
	c := checkerTestNew(b, checkerTestHC(config.CheckTCP))
	checkerTestBench(b, c, checkerTestHelper(b, "tcp"))
}

// BenchmarkTCPCheckPoller: the same, waiting through the runtime poller as
// a check of a remote server does.
func BenchmarkTCPCheckPoller(b *testing.B) {
	c := newTCPChecker(checkerTestHC(config.CheckTCP))
	c.wait = true
	checkerTestBench(b, c, checkerTestHelper(b, "tcp"))
}

// BenchmarkTCPCheckRefused: a check of a closed port on this host.
func BenchmarkTCPCheckRefused(b *testing.B) {
	c := checkerTestNew(b, checkerTestHC(config.CheckTCP))
	tcpTestBenchFail(b, c, checkerTestClosedPort(b, "tcp"), "connect: connection refused")
}

// BenchmarkTCPCheckDialer and BenchmarkTCPCheckDialerRefused: the same
// checks with net.Dialer, as before.
func BenchmarkTCPCheckDialer(b *testing.B) {
	checkerTestBench(b, tcpTestDialer{dialer: checkerDialer()}, checkerTestHelper(b, "tcp"))
}

func BenchmarkTCPCheckDialerRefused(b *testing.B) {
	tcpTestBenchFail(b, tcpTestDialer{dialer: checkerDialer()}, checkerTestClosedPort(b, "tcp"), "connect: connection refused")
}

// tcpTestBenchFail is checkerTestBench for a check that must fail with want.
func tcpTestBenchFail(b *testing.B, c Checker, target netip.AddrPort, want string) {
	ctx := context.Background()
	tgt := Target{Addr: target, Service: "bench"}
	if err := c.Check(ctx, tgt); err == nil || err.Error() != want {
		b.Fatalf("check: %v; want %s", err, want)
	}
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		if err := c.Check(cctx, tgt); err == nil {
			b.Fatal("check passed")
		}
		cancel()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}
