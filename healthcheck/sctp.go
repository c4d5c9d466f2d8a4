package healthcheck

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

// newSCTPChecker returns the TCP check on a one-to-one (SOCK_STREAM) SCTP
// socket, whose non-blocking connect and poll behave as TCP's: healthy
// when the real server's SCTP stack completes the four-way handshake
// (INIT, INIT-ACK, COOKIE-ECHO, COOKIE-ACK), which it does only for a port
// something listens on; otherwise it answers the INIT with an ABORT
// (connection refused). Closing with SO_LINGER 0 sends an ABORT instead of
// the SHUTDOWN exchange, as the TCP check's reset does.
//
// The socket needs the kernel's sctp module on the director (the kernel
// loads it on demand when it can): without it, every check fails with a
// reason that says so.
func newSCTPChecker(hc config.HealthCheck) *tcpChecker {
	c := newTCPChecker(hc)
	c.proto = unix.IPPROTO_SCTP
	return c
}

// sctpUnsupported is the failure of a director whose kernel has no SCTP
// sockets: what to do about it, not just the errno.
type sctpUnsupported struct{ errno syscall.Errno }

func (e sctpUnsupported) Error() string {
	return fmt.Sprintf("socket: %v: this kernel has no SCTP sockets (load module sctp: modprobe sctp)", e.errno)
}

func (e sctpUnsupported) Unwrap() error { return e.errno }
