package topo

// SCTP for the backend and probe roles. Go's net package has no SCTP: a
// one-to-one (SOCK_STREAM) SCTP socket is made with the system calls and
// handed to the runtime poller as an *os.File, whose deadlines and
// blocking reads and writes then work as for any socket.

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// BackendSCTPPort is where StartBackend serves SCTP when asked
// (BackendConfig.SCTPPort); StartBackends does not: SCTP needs the
// kernel's sctp module, which a test loads first.
const BackendSCTPPort = 2905

// sctpSocket makes a non-blocking one-to-one SCTP socket of family.
func sctpSocket(family int) (*os.File, error) {
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_SCTP)
	if err != nil {
		return nil, fmt.Errorf("SCTP socket: %w (is the sctp module loaded?)", err)
	}
	return os.NewFile(uintptr(fd), "sctp"), nil
}

// sctpListen listens for SCTP associations on port of every address, IPv4
// and IPv6: an IPv6 socket that is not IPv6-only takes IPv4 associations
// too, their peers as IPv4-mapped addresses.
func sctpListen(port int) (*os.File, error) {
	f, err := sctpSocket(unix.AF_INET6)
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0),
			unix.Bind(int(fd), &unix.SockaddrInet6{Port: port}),
			unix.Listen(int(fd), 128))
	})
	if err = errors.Join(err, serr); err != nil {
		f.Close()
		return nil, fmt.Errorf("SCTP listen on port %d: %w", port, err)
	}
	return f, nil
}

// serveSCTP is the SCTP half of a backend: every association accepted on
// ln gets one line "id=ID client=IP:PORT" (the peer address it saw) and is
// then shut down. It returns when ln fails (closed when the backend stops).
func serveSCTP(ln *os.File, id string) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return err
	}
	for {
		var (
			nfd  int
			peer unix.Sockaddr
			aerr error
		)
		err := rc.Read(func(fd uintptr) bool {
			nfd, peer, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return aerr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return err
		case aerr == unix.ECONNABORTED || aerr == unix.EINTR:
			continue // the peer gave up before the accept (a health check's ABORT)
		case aerr != nil:
			return fmt.Errorf("SCTP accept: %w", aerr)
		}
		go sctpAnswer(os.NewFile(uintptr(nfd), "sctp"), id, sockaddrAddrPort(peer))
	}
}

// sctpAnswer writes the backend's line to an association and closes it
// gracefully (SHUTDOWN once the line is acknowledged). A health check's
// association is aborted before it reads: the write fails, which is fine.
func sctpAnswer(f *os.File, id string, peer netip.AddrPort) {
	defer f.Close()
	if err := f.SetWriteDeadline(time.Now().Add(pushStall)); err != nil {
		return
	}
	_, _ = fmt.Fprintf(f, "id=%s client=%s\n", id, peer)
}

// sockaddrAddrPort is a socket address as netip's, IPv4-mapped addresses
// unmapped.
func sockaddrAddrPort(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// sctpAsk sets up a new SCTP association to target (so IPVS schedules it
// on its own), reads the backend's line and closes it.
func sctpAsk(target string, timeout time.Duration) (string, error) {
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		return "", err
	}
	var family int
	var sa unix.Sockaddr
	if a := ap.Addr(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Addr: a.As4(), Port: int(ap.Port())}
	} else {
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Addr: a.As16(), Port: int(ap.Port())}
	}
	f, err := sctpSocket(family)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := f.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if err := sctpConnect(f, sa); err != nil {
		return "", fmt.Errorf("SCTP connect %s: %w", target, err)
	}
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("SCTP read from %s: %w", target, err)
	}
	return line, nil
}

// sctpConnect connects f to sa, waiting through the poller (until f's
// deadline) for the handshake: the socket turns writable when the
// association is up, or has an error when the peer aborted it.
func sctpConnect(f *os.File, sa unix.Sockaddr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = unix.Connect(int(fd), sa) }); err != nil {
		return err
	}
	if cerr != unix.EINPROGRESS {
		return cerr
	}
	err = rc.Write(func(fd uintptr) bool {
		soerr, gerr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case gerr != nil:
			cerr = gerr
		case soerr != 0:
			cerr = unix.Errno(soerr)
		default:
			// No error: up when it has a peer, else still setting up.
			_, perr := unix.Getpeername(int(fd))
			if perr == unix.ENOTCONN {
				return false
			}
			cerr = perr
		}
		return true
	})
	return errors.Join(err, cerr)
}
