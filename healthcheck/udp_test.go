package healthcheck

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// udpTestServer serves UDP on 127.0.0.1: it replies to each datagram with
// what reply returns for it, or not at all for nil.
func udpTestServer(t testing.TB, reply func([]byte) []byte) netip.AddrPort {
	t.Helper()
	return udpTestServeOn(t, "127.0.0.1", func(req []byte, _ netip.AddrPort) []byte { return reply(req) })
}

// udpTestServeOn serves UDP on host; reply also gets the sender's address.
func udpTestServeOn(t testing.TB, host string, reply func(req []byte, from netip.AddrPort) []byte) netip.AddrPort {
	t.Helper()
	conn, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(host), 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if out := reply(bytes.Clone(buf[:n]), from); out != nil {
				conn.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	return checkerTestAddr(conn.LocalAddr())
}

func TestUDPCheck(t *testing.T) {
	t.Parallel()
	echo := udpTestServer(t, func(b []byte) []byte { return append([]byte("echo: "), b...) })
	empty := udpTestServer(t, func([]byte) []byte { return []byte{} })
	silent := udpTestServer(t, func([]byte) []byte { return nil })
	big := udpTestServer(t, func([]byte) []byte { return append(bytes.Repeat([]byte("x"), 60000), "needle"...) })
	tests := []struct {
		name    string
		target  netip.AddrPort
		payload string
		expect  string
		timeout time.Duration
		want    string
	}{
		{name: "any reply", target: echo, payload: "ping", want: ""},
		{name: "expect match", target: echo, payload: "ping", expect: "echo: ping", want: ""},
		{name: "expect mismatch", target: echo, payload: "ping", expect: "pong", want: `reply does not contain "pong"`},
		{name: "empty reply", target: empty, payload: "ping", want: ""},
		{name: "empty reply with expect", target: empty, payload: "ping", expect: "pong", want: `reply does not contain "pong"`},
		{name: "large reply", target: big, payload: "ping", expect: "needle", want: ""},
		{name: "no reply", target: silent, payload: "ping", timeout: 500 * time.Millisecond, want: "wait for reply: timeout after 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hc := checkerTestHC(config.CheckUDP)
			hc.Payload, hc.Expect = []byte(tt.payload), []byte(tt.expect)
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: tt.target}, timeout)
			checkerTestWant(t, err, tt.want)
			t.Logf("%v after %s", err, elapsed)
		})
	}
}

// TestUDPCheckRefused: an ICMP port unreachable fails the check at once,
// not at the timeout.
func TestUDPCheckRefused(t *testing.T) {
	t.Parallel()
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload = []byte("ping")
	const timeout = 5 * time.Second
	err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: checkerTestClosedPort(t, "udp")}, timeout)
	checkerTestWant(t, err, "wait for reply: connection refused")
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error %v does not wrap ECONNREFUSED", err)
	}
	if elapsed > timeout/2 {
		t.Errorf("refused check took %s; want far less than its timeout of %s", elapsed, timeout)
	}
}

// TestUDPCheckSourceAddress: the payload is sent from source_address.
func TestUDPCheckSourceAddress(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "127.0.0.2")
	srv := udpTestServeOn(t, "127.0.0.1", func(_ []byte, from netip.AddrPort) []byte { return []byte(from.Addr().String()) })
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload, hc.Expect = []byte("who am I"), []byte("127.0.0.2")
	hc.SourceAddress = netip.MustParseAddr("127.0.0.2")
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: srv}, 2*time.Second)
	checkerTestWant(t, err, "")
}

func TestUDPCheckIPv6(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "::1")
	srv := udpTestServeOn(t, "::1", func(req []byte, _ netip.AddrPort) []byte { return req })
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload, hc.Expect = []byte("ping6"), []byte("ping6")
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: srv}, 2*time.Second)
	checkerTestWant(t, err, "")
}
