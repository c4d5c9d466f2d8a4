package healthcheck

// The checkers: this file holds their API and shared helpers, and one file
// per check type (tcp.go, http.go, udp.go, dns.go, exec.go, sctp.go) each
// checker.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

// Target is what one check probes: a real server's address and the port to check.
type Target struct {
	Addr    netip.AddrPort // real server address with the check port already chosen (hc.Port or the real server's port)
	Service string         // lbd service name, for exec's environment
}

// Checker checks one target once. It must honour ctx's deadline (the
// scheduler sets it to hc.Timeout) and return nil for healthy or an error
// saying briefly why not (e.g. "HTTP 503", "connect: connection refused",
// "connect: timeout after 1s", "body does not contain \"ok\"").
//
// Errors wrap what caused them where there is something to wrap, so that
// errors.Is(err, syscall.ECONNREFUSED) works. A timeout is a failure like
// any other ("timeout after 1s", wrapping nothing); when ctx was canceled
// before its deadline the error wraps context.Canceled, and the scheduler
// should discard the result rather than count it as a failure.
//
// Real servers are not trusted: a checker reads no more of an answer than
// its caps allow (see limits.go), and quotes it cut short. A checker that
// panics fails its check (Manager recovers it), and does not end lbd.
type Checker interface {
	Check(ctx context.Context, t Target) error
}

// NewChecker returns the checker for hc (hc.Type must not be "none"). It is
// built once per distinct check definition and shared by every target, so
// it is safe for concurrent use and cheap per call. Checkers hold no open
// resources: nothing needs closing when a checker is dropped.
func NewChecker(hc config.HealthCheck) (Checker, error) {
	var (
		c   Checker
		err error
	)
	switch hc.Type {
	case config.CheckTCP:
		c = newTCPChecker(hc)
	case config.CheckSCTP:
		c = newSCTPChecker(hc)
	case config.CheckHTTP, config.CheckHTTPS:
		c, err = newHTTPChecker(hc)
	case config.CheckUDP:
		c, err = newUDPChecker(hc)
	case config.CheckDNS:
		c, err = newDNSChecker(hc)
	case config.CheckExec:
		c, err = newExecChecker(hc)
	case config.CheckNone, "":
		return nil, fmt.Errorf("health check type %q has no checker", hc.Type)
	default:
		return nil, fmt.Errorf("unknown health check type %q", hc.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("%s health check: %w", hc.Type, err)
	}
	return c, nil
}

// checkerDefaultTimeout bounds a check whose ctx has no deadline and whose
// definition has no timeout; it is the configuration's default.
const checkerDefaultTimeout = time.Second

// checkerTimeout is the timeout a checker applies when the caller's ctx has
// no deadline, so that no check can hang forever.
func checkerTimeout(hc config.HealthCheck) time.Duration {
	if hc.Timeout > 0 {
		return hc.Timeout
	}
	return checkerDefaultTimeout
}

// checkerStart prepares one check: it makes sure ctx has a deadline (the
// scheduler's, or timeout from now) and returns it with the start time that
// timeout messages are measured from.
func checkerStart(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc, time.Time, time.Time) {
	start := time.Now()
	if dl, ok := ctx.Deadline(); ok {
		return ctx, func() {}, start, dl
	}
	ctx, cancel := context.WithDeadline(ctx, start.Add(timeout))
	dl, _ := ctx.Deadline()
	return ctx, cancel, start, dl
}

// checkerErr turns what went wrong during op into the brief reason the
// scheduler logs: a timeout says how long the check had, a canceled check
// wraps context.Canceled, and a system call error drops the addresses that
// net adds (the scheduler already knows the target) but keeps the errno.
func checkerErr(ctx context.Context, start time.Time, op string, err error) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s: %w", op, context.Canceled)
	}
	if ctx.Err() != nil || checkerIsTimeout(err) {
		return fmt.Errorf("%s: timeout after %s", op, checkerBudget(ctx, start))
	}
	var se *os.SyscallError
	if errors.As(err, &se) {
		return fmt.Errorf("%s: %w", op, se.Err)
	}
	// Parsers' errors quote what the real server sent: a malformed
	// status line, a certificate's names.
	return outsideWrap(op, err)
}

func checkerIsTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// checkerBudget is how long the check was given: from its start to ctx's
// deadline, which reads as the configured timeout ("1s"), not as whatever
// the clock said when the error surfaced.
func checkerBudget(ctx context.Context, start time.Time) time.Duration {
	d := time.Since(start)
	if dl, ok := ctx.Deadline(); ok {
		d = dl.Sub(start)
	}
	return d.Round(time.Millisecond)
}

// checkerWatch makes conn's blocking calls return when ctx is canceled
// before its deadline (e.g. the service was removed); the deadline itself
// is set on conn directly. The returned func must be called when done.
func checkerWatch(ctx context.Context, conn net.Conn, deadline time.Time) (stop func() bool, err error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	return context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) }), nil
}

// checkerDialer returns the dialer every network checker uses.
//
// Go's Dialer.DialTCP always binds the socket, to the wildcard address when
// no source address is configured. A bind to port 0 must pick a port that
// is free towards every destination, not knowing the one to come;
// IP_BIND_ADDRESS_NO_PORT defers the choice to connect, where the port only
// needs to be free towards this real server, as for an unbound socket.
// Without it, one ephemeral port range would bound the checks in flight
// towards all real servers together.
func checkerDialer() *net.Dialer {
	return &net.Dialer{
		KeepAlive: -1, // a check's connection lives for one request
		Control: func(network, _ string, c syscall.RawConn) error {
			if network != "tcp4" && network != "tcp6" {
				return nil
			}
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
			}); err != nil {
				return err
			}
			return serr
		},
	}
}

// checkerLocal is the local address to dial from: hc.SourceAddress with any
// port, or the zero AddrPort for the kernel's choice.
func checkerLocal(hc config.HealthCheck) netip.AddrPort {
	if !hc.SourceAddress.IsValid() {
		return netip.AddrPort{}
	}
	return netip.AddrPortFrom(hc.SourceAddress.Unmap(), 0)
}

// checkerRemote validates t's address; an IPv4-mapped IPv6 address is
// dialed as IPv4, which is what the kernel would do with it anyway.
func checkerRemote(t Target) (netip.AddrPort, error) {
	if !t.Addr.IsValid() || t.Addr.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("invalid target address %s", t.Addr)
	}
	return netip.AddrPortFrom(t.Addr.Addr().Unmap(), t.Addr.Port()), nil
}

// checkerQuote quotes s for an error message, cut to a readable length.
func checkerQuote(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
