package healthcheck

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/lbdproject/lbd/config"
)

// tcpChecker connects and closes: healthy when the real server accepts.
type tcpChecker struct {
	dialer  *net.Dialer
	local   netip.AddrPort
	timeout time.Duration
}

func newTCPChecker(hc config.HealthCheck) *tcpChecker {
	return &tcpChecker{dialer: checkerDialer(), local: checkerLocal(hc), timeout: checkerTimeout(hc)}
}

func (c *tcpChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, _ := checkerStart(ctx, c.timeout)
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
