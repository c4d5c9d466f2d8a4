package healthcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
)

// udpMaxReply is the largest UDP payload; a reply is read whole so that
// expect can match anywhere in it.
const udpMaxReply = 65535

// udpChecker sends the payload and waits for one reply, on a connected
// socket so that only the real server's datagrams are received and an ICMP
// port unreachable fails the check at once (ECONNREFUSED) instead of at the
// timeout.
type udpChecker struct {
	dialer  *net.Dialer
	local   netip.AddrPort
	timeout time.Duration
	payload []byte
	expect  []byte
	buffers sync.Pool // *[]byte of udpMaxReply, so a check allocates no 64 KiB
}

func newUDPChecker(hc config.HealthCheck) (*udpChecker, error) {
	if len(hc.Payload) == 0 {
		return nil, errors.New("payload is empty: a UDP check needs something to send")
	}
	c := &udpChecker{
		dialer:  checkerDialer(),
		local:   checkerLocal(hc),
		timeout: checkerTimeout(hc),
		payload: hc.Payload,
		expect:  hc.Expect,
	}
	c.buffers.New = func() any { b := make([]byte, udpMaxReply); return &b }
	return c, nil
}

func (c *udpChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, deadline := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	bp := c.buffers.Get().(*[]byte)
	defer c.buffers.Put(bp)
	reply, err := udpExchange(ctx, start, deadline, c.dialer, c.local, raddr, c.payload, *bp)
	if err != nil {
		return err
	}
	if len(c.expect) > 0 && !bytes.Contains(reply, c.expect) {
		return fmt.Errorf("reply does not contain %s", checkerQuote(string(c.expect)))
	}
	return nil
}

// udpExchange sends msg from local to raddr and returns the first reply,
// read into buf, by the deadline. Errors are checkerErr's, naming the step.
func udpExchange(ctx context.Context, start, deadline time.Time, d *net.Dialer, local, raddr netip.AddrPort, msg, buf []byte) ([]byte, error) {
	conn, err := d.DialUDP(ctx, "udp", local, raddr)
	if err != nil {
		return nil, checkerErr(ctx, start, "connect", err)
	}
	defer conn.Close()
	stop, err := checkerWatch(ctx, conn, deadline)
	if err != nil {
		return nil, checkerErr(ctx, start, "connect", err)
	}
	defer stop()
	if _, err := conn.Write(msg); err != nil {
		return nil, checkerErr(ctx, start, "send", err)
	}
	n, err := conn.Read(buf)
	if err != nil {
		return nil, checkerErr(ctx, start, "wait for reply", err)
	}
	return buf[:n], nil
}
