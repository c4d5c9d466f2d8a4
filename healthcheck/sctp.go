package healthcheck

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

// sctpChecker sets up an SCTP association with the real server and
// aborts it: healthy when the real server's SCTP stack completes the
// four-way handshake (INIT, INIT-ACK, COOKIE-ECHO, COOKIE-ACK), which it
// does only for a port something listens on; otherwise it answers the
// INIT with an ABORT (connection refused). It is the TCP check on a
// one-to-one (SOCK_STREAM) SCTP socket, whose non-blocking connect and
// poll behave as TCP's; closing with SO_LINGER 0 sends an ABORT instead
// of the SHUTDOWN exchange, as the TCP check's reset does.
//
// The socket needs the kernel's sctp module on the director (the kernel
// loads it on demand when it can): without it, every check fails with a
// reason that says so.
type sctpChecker struct {
	local   netip.AddrPort // source address (port 0), or zero for the kernel's choice
	timeout time.Duration
	wait    bool // tests: skip the immediate poll, always wait through the runtime poller
}

func newSCTPChecker(hc config.HealthCheck) *sctpChecker {
	return &sctpChecker{local: checkerLocal(hc), timeout: checkerTimeout(hc)}
}

func (c *sctpChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, deadline := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	err = tcpProbe(ctx, unix.IPPROTO_SCTP, c.local, raddr, deadline, c.wait)
	switch err {
	case nil:
		return nil
	case syscall.EPROTONOSUPPORT, syscall.ESOCKTNOSUPPORT:
		return sctpUnsupported{err.(syscall.Errno)}
	}
	return checkerErr(ctx, start, "connect", err)
}

// sctpUnsupported is the failure of a director whose kernel has no SCTP
// sockets: what to do about it, not just the errno.
type sctpUnsupported struct{ errno syscall.Errno }

func (e sctpUnsupported) Error() string {
	return fmt.Sprintf("socket: %v: this kernel has no SCTP sockets (load module sctp: modprobe sctp)", e.errno)
}

func (e sctpUnsupported) Unwrap() error { return e.errno }
