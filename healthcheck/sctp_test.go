package healthcheck

import (
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

// sctpTestAvailable reports whether this kernel makes SCTP sockets (the
// sctp module loaded or loadable), and the error if not.
func sctpTestAvailable() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return err
	}
	unix.Close(fd)
	return nil
}

// sctpTestListener listens for SCTP associations on host (one-to-one
// style) and returns its address. Nothing accepts: the kernel completes
// the handshake and queues the association, which the check's ABORT
// removes again.
func sctpTestListener(t testing.TB, host string) netip.AddrPort {
	t.Helper()
	a := netip.MustParseAddr(host)
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Addr: a.As16()})
	if a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: a.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		t.Fatal(err)
	}
	got, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	switch got := got.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(a, uint16(got.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(a, uint16(got.Port))
	}
	t.Fatalf("getsockname: %T", got)
	return netip.AddrPort{}
}

// sctpTestClosedPort returns an address of 127.0.0.1 where no SCTP
// socket listens: one a listener had, and gave back.
func sctpTestClosedPort(t testing.TB) netip.AddrPort {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(sa.(*unix.SockaddrInet4).Port))
}

// sctpTestModes are the SCTP check's two ways to learn its outcome, as
// tcpTestModes are the TCP check's.
func sctpTestModes(hc config.HealthCheck) []struct {
	name string
	c    *tcpChecker
} {
	poller := newSCTPChecker(hc)
	poller.wait = true
	return []struct {
		name string
		c    *tcpChecker
	}{{"immediate", newSCTPChecker(hc)}, {"poller", poller}}
}

// TestSCTPCheck checks a listening SCTP server (healthy) and a port
// nothing listens on (refused: the kernel answers the INIT with an ABORT),
// both ways. On a kernel without SCTP (this test's usual machine: the
// e2e test proves the check on the guest's kernel, through lbd) every
// check fails saying which module to load.
func TestSCTPCheck(t *testing.T) {
	hc := checkerTestHC(config.CheckSCTP)
	if err := sctpTestAvailable(); err != nil {
		for _, m := range sctpTestModes(hc) {
			err, _ := checkerTestRun(t, m.c, Target{Addr: netip.MustParseAddrPort("127.0.0.1:2905")}, time.Second)
			var u sctpUnsupported
			if !errors.As(err, &u) || (!errors.Is(err, syscall.EPROTONOSUPPORT) && !errors.Is(err, syscall.ESOCKTNOSUPPORT)) ||
				!strings.Contains(err.Error(), "modprobe sctp") {
				t.Errorf("%s: %v; want the socket's error, saying to load sctp", m.name, err)
			}
		}
		t.Logf("no SCTP sockets here (%v): checked the failure only", err)
		return
	}
	up := sctpTestListener(t, "127.0.0.1")
	closed := sctpTestClosedPort(t)
	for _, m := range sctpTestModes(hc) {
		for range 3 { // each check's association is aborted: the next one is new
			if err, _ := checkerTestRun(t, m.c, Target{Addr: up}, 5*time.Second); err != nil {
				t.Errorf("%s: listening %s: %v", m.name, up, err)
			}
		}
		err, _ := checkerTestRun(t, m.c, Target{Addr: closed}, 5*time.Second)
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("%s: nothing at %s: %v; want connection refused", m.name, closed, err)
		}
	}
}
