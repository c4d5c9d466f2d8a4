package healthcheck

import (
	"context"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

// tcpChecker connects and closes: healthy when the real server accepts.
//
// It makes its own non-blocking socket rather than dialing with net.Dialer,
// whose generality (context plumbing, a poller registration, getsockname and
// getpeername, TCP_NODELAY, a parked goroutine until the poller reports the
// connection, 32 allocations) cost as much CPU as the connection itself.
// A check is socket, connect, then a poll with a zero timeout: against a
// server on this host, or one that answers before connect returns, the
// handshake is already over and the check ends without waiting. Otherwise
// the socket is handed to the runtime poller (os.NewFile) and the check
// waits for it to become writable, until ctx's deadline or cancellation.
type tcpChecker struct {
	proto   int            // the socket's protocol: 0 (TCP) or IPPROTO_SCTP (newSCTPChecker)
	local   netip.AddrPort // source address (port 0), or zero for the kernel's choice
	timeout time.Duration
	wait    bool // tests: skip the immediate poll, always wait through the runtime poller
}

func newTCPChecker(hc config.HealthCheck) *tcpChecker {
	return &tcpChecker{local: checkerLocal(hc), timeout: checkerTimeout(hc)}
}

func (c *tcpChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, deadline := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	switch err := tcpProbe(ctx, c.proto, c.local, raddr, deadline, c.wait); {
	case err == nil:
		return nil
	case err == syscall.ECONNREFUSED && ctx.Err() == nil:
		return tcpRefused{} // what checkerErr would say, without formatting it every time
	case c.proto != 0 && (err == syscall.EPROTONOSUPPORT || err == syscall.ESOCKTNOSUPPORT):
		return sctpUnsupported{err.(syscall.Errno)}
	default:
		return checkerErr(ctx, start, "connect", err)
	}
}

// tcpRefused is the most common failure, as checkerErr would make it
// ("connect: " and the errno), but a constant: no allocation, and no
// package variable.
type tcpRefused struct{}

func (tcpRefused) Error() string { return "connect: connection refused" }

func (tcpRefused) Unwrap() error { return syscall.ECONNREFUSED }

// tcpProbe connects a stream socket of protocol proto (0: TCP, or
// IPPROTO_SCTP: a one-to-one SCTP socket, whose connect and poll behave
// as TCP's) from local (zero: the kernel's choice) to raddr and closes
// the connection with a reset (SCTP: an ABORT). It returns nil when the
// connection was established, and otherwise a system call's errno, ctx's
// error or the poller's timeout, for checkerErr.
func tcpProbe(ctx context.Context, proto int, local, raddr netip.AddrPort, deadline time.Time, wait bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The address family net.Dialer would choose: IPv4 when both ends are
	// IPv4, otherwise IPv6 with any IPv4 address mapped, so that a mixed
	// pair fails in the kernel with the same error as it did there.
	family := unix.AF_INET
	if !raddr.Addr().Is4() || local.IsValid() && !local.Addr().Is4() {
		family = unix.AF_INET6
	}
	var rsa, lsa tcpSockaddr
	if err := rsa.set(family, raddr); err != nil {
		return err
	}
	if local.IsValid() {
		if err := lsa.set(family, local); err != nil {
			return err
		}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return err
	}
	done, err := tcpStart(fd, family, proto, &lsa, &rsa, wait)
	if !done {
		return tcpWait(ctx, fd, deadline) // closes fd
	}
	if err == nil {
		tcpLinger(fd)
	}
	unix.Close(fd)
	return err
}

// tcpStart binds fd to lsa (when set) and starts connecting it to rsa. It
// reports done when the outcome is known already: an error, or the
// connection established (err nil).
func tcpStart(fd, family, proto int, lsa, rsa *tcpSockaddr, wait bool) (done bool, err error) {
	if family == unix.AF_INET6 && (lsa.mapped() || rsa.mapped()) {
		// As net.Dialer: accept IPv4-mapped addresses whatever the
		// net.ipv6.bindv6only sysctl says.
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return true, err
		}
	}
	if lsa.len != 0 {
		// Bound to port 0, the socket would take a port free towards every
		// destination; IP_BIND_ADDRESS_NO_PORT defers the choice to connect
		// (see checkerDialer). SCTP's bind takes its port at once,
		// whatever the option says.
		if proto == 0 {
			if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1); err != nil {
				return true, err
			}
		}
		if _, _, e := syscall.RawSyscall(unix.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&lsa.raw)), uintptr(lsa.len)); e != 0 {
			return true, e
		}
	}
	// A non-blocking connect does not sleep, but over loopback it runs the
	// whole handshake (both ends' softirq work, ~20µs) before it returns,
	// so it is a Syscall: the scheduler may hand this P over meanwhile.
	_, _, e := syscall.Syscall(unix.SYS_CONNECT, uintptr(fd), uintptr(unsafe.Pointer(&rsa.raw)), uintptr(rsa.len))
	switch e {
	case 0, unix.EISCONN:
		return true, nil
	case unix.EINPROGRESS, unix.EALREADY, unix.EINTR:
	default:
		return true, e
	}
	if wait {
		return false, nil
	}
	return tcpConnected(fd)
}

// tcpConnected reports whether fd's connect has finished, and how.
func tcpConnected(fd int) (done bool, err error) {
	pfd := unix.PollFd{Fd: int32(fd), Events: unix.POLLOUT}
	var ts unix.Timespec // zero: do not wait
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
		switch {
		case e == unix.EINTR:
			// A signal (the runtime's preemption) is no answer: under
			// tcpWait, "not yet" would wait for an edge that may have
			// passed already.
			continue
		case e != 0:
			return true, e
		case n == 0:
			return false, nil
		case pfd.Revents&(unix.POLLERR|unix.POLLHUP) == 0 && pfd.Revents&unix.POLLOUT != 0:
			return true, nil
		}
		break
	}
	soerr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	switch {
	case err != nil:
		return true, err
	case soerr != 0:
		return true, syscall.Errno(soerr)
	}
	// No error pending yet not writable, which should not happen: as
	// net.Dialer, believe the connection only if it has a peer.
	if _, err := unix.Getpeername(fd); err != nil {
		return true, err
	}
	return true, nil
}

// tcpWait waits through the runtime poller until fd's connect finishes,
// ctx is done or deadline passes, then closes fd.
func tcpWait(ctx context.Context, fd int, deadline time.Time) error {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if err := f.SetWriteDeadline(deadline); err != nil {
		return err // not pollable: the runtime poller refused it
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	var cerr error
	err = rc.Write(func(fd uintptr) bool {
		var done bool
		done, cerr = tcpConnected(int(fd))
		return done
	})
	if err == nil && cerr == nil {
		err = rc.Control(func(fd uintptr) { tcpLinger(int(fd)) })
	}
	if err != nil {
		return err
	}
	return cerr
}

// tcpLinger makes the close of a connected socket send a reset (see tcpClose).
func tcpLinger(fd int) {
	l := unix.Linger{Onoff: 1, Linger: 0}
	_, _, _ = syscall.RawSyscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_LINGER, uintptr(unsafe.Pointer(&l)), unix.SizeofLinger, 0)
}

// tcpSockaddr is a socket address in the kernel's layout, on the stack:
// the system calls take it without the allocation unix.Sockaddr costs.
type tcpSockaddr struct {
	raw unix.RawSockaddrInet6 // for AF_INET, the first bytes hold a RawSockaddrInet4
	len uint32                // zero: unset
}

// set makes s the address a in family; an IPv4 address in AF_INET6 is
// mapped.
func (s *tcpSockaddr) set(family int, a netip.AddrPort) error {
	port := (*[2]byte)(unsafe.Pointer(&s.raw.Port)) // both layouts have it at the same offset
	port[0], port[1] = byte(a.Port()>>8), byte(a.Port())
	if family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa4.Family = unix.AF_INET
		sa4.Addr = a.Addr().As4()
		s.len = unix.SizeofSockaddrInet4
		return nil
	}
	s.raw.Family = unix.AF_INET6
	s.raw.Addr = a.Addr().As16()
	if zone := a.Addr().Zone(); zone != "" {
		id, err := tcpZoneIndex(zone)
		if err != nil {
			return err
		}
		s.raw.Scope_id = id
	}
	s.len = unix.SizeofSockaddrInet6
	return nil
}

// mapped reports whether s holds an IPv4-mapped IPv6 address.
func (s *tcpSockaddr) mapped() bool {
	return s.len == unix.SizeofSockaddrInet6 && netip.AddrFrom16(s.raw.Addr).Is4In6()
}

// tcpZoneIndex is the interface index of an IPv6 zone: a number, or an
// interface's name.
func tcpZoneIndex(zone string) (uint32, error) {
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}

// tcpDial connects from local (zero: the kernel's choice) to raddr.
func tcpDial(ctx context.Context, d *net.Dialer, local, raddr netip.AddrPort) (*net.TCPConn, error) {
	return d.DialTCP(ctx, "tcp", local, raddr)
}

// tcpClose closes a check's connection with a reset rather than a FIN, as
// HAProxy does for its checks: the connection carries nothing worth a
// graceful close, and closing first with a FIN would leave it in TIME_WAIT
// on the director for a minute: at a thousand checks a second, sixty
// thousand sockets holding local ports.
func tcpClose(conn *net.TCPConn) {
	_ = conn.SetLinger(0)
	_ = conn.Close()
}
