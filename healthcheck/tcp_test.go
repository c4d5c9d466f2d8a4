package healthcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
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
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrPortFrom(netip.AddrFrom4(sa.(*syscall.SockaddrInet4).Addr), uint16(sa.(*syscall.SockaddrInet4).Port))
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

func TestTCPCheck(t *testing.T) {
	t.Parallel()
	open := tcpTestListener(t, "127.0.0.1")
	full := tcpTestFullListener(t)
	tests := []struct {
		name    string
		target  netip.AddrPort
		timeout time.Duration
		want    string
	}{
		{"open port", open, time.Second, ""},
		{"closed port", checkerTestClosedPort(t, "tcp"), time.Second, "connect: connection refused"},
		{"no answer", full, 500 * time.Millisecond, "connect: timeout after 500ms"},
	}
	c := checkerTestNew(t, checkerTestHC(config.CheckTCP))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err, elapsed := checkerTestRun(t, c, Target{Addr: tt.target}, tt.timeout)
			checkerTestWant(t, err, tt.want)
			if tt.want == "connect: connection refused" && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("error %v does not wrap ECONNREFUSED", err)
			}
			t.Logf("%s: %v after %s", tt.name, err, elapsed)
		})
	}
}

func TestTCPCheckIPv6(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "::1")
	c := checkerTestNew(t, checkerTestHC(config.CheckTCP))
	err, _ := checkerTestRun(t, c, Target{Addr: tcpTestListener(t, "::1")}, time.Second)
	checkerTestWant(t, err, "")
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := checkerTestAddr(l.Addr())
	l.Close()
	err, _ = checkerTestRun(t, c, Target{Addr: closed}, time.Second)
	checkerTestWant(t, err, "connection refused")
}

// TestTCPCheckSourceAddress: the check connects from source_address.
func TestTCPCheckSourceAddress(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "127.0.0.2")
	from := make(chan netip.Addr, 1)
	l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) {
		from <- checkerTestAddr(c.RemoteAddr()).Addr()
		c.Close()
	})
	hc := checkerTestHC(config.CheckTCP)
	hc.SourceAddress = netip.MustParseAddr("127.0.0.2")
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: checkerTestAddr(l.Addr())}, time.Second)
	checkerTestWant(t, err, "")
	if got := <-from; got != hc.SourceAddress {
		t.Errorf("connection came from %s; want %s", got, hc.SourceAddress)
	}
}

// TestTCPCheckCanceled: canceling ctx ends a hanging connect at once.
func TestTCPCheckCanceled(t *testing.T) {
	t.Parallel()
	c := checkerTestNew(t, checkerTestHC(config.CheckTCP))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	err := c.Check(ctx, Target{Addr: tcpTestFullListener(t)})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("canceled check: %v; want an error wrapping context.Canceled", err)
	}
	if d := time.Since(start); d > checkerTestSlack {
		t.Errorf("canceled check took %s", d)
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
	c := checkerTestNew(t, checkerTestHC(config.CheckTCP))
	err, _ := checkerTestRun(t, c, Target{Addr: checkerTestAddr(l.Addr())}, time.Second)
	checkerTestWant(t, err, "")
	if err := <-readErr; !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("server read %v; want ECONNRESET", err)
	}
}

func BenchmarkTCPCheck(b *testing.B) {
	c := checkerTestNew(b, checkerTestHC(config.CheckTCP))
	checkerTestBench(b, c, checkerTestHelper(b, "tcp"))
}
