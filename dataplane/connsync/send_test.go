package connsync

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

// packets records the messages a Sender writes.
type packets struct {
	msgs   [][]byte
	closed bool
}

func (p *packets) Write(b []byte) (int, error) {
	p.msgs = append(p.msgs, slices.Clone(b))
	return len(b), nil
}

func (p *packets) Close() error { p.closed = true; return nil }

// decoded decodes every message as a backup of syncid 42 would.
func (p *packets) decoded(t *testing.T) []wireConn {
	t.Helper()
	var out []wireConn
	for i, m := range p.msgs {
		ws, err := decodeMessage(m, 42)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		out = append(out, ws...)
	}
	return out
}

func newTestSender(maxLen int, o Options) (*Sender, *packets) {
	p := &packets{}
	if o.Rate == 0 {
		o.Rate = -1 // unit tests do not wait
	}
	return newSender(p, 42, maxLen, o, "test"), p
}

func seq(conns ...Conn) iter.Seq2[Conn, error] {
	return func(yield func(Conn, error) bool) {
		for _, c := range conns {
			if !yield(c, nil) {
				return
			}
		}
	}
}

var (
	web      = lvs.Key{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Protocol: lvs.TCP}
	sticky   = lvs.Key{Addr: netip.MustParseAddr("198.18.100.2"), Port: 80, Protocol: lvs.TCP}
	dns6     = lvs.Key{Addr: netip.MustParseAddr("2001:2:0:100::1"), Port: 53, Protocol: lvs.UDP}
	direct   = lvs.Key{Addr: netip.MustParseAddr("198.18.100.3"), Port: 443, Protocol: lvs.TCP}
	marked   = lvs.FWMarkKey(7, lvs.IPv4)
	marked6  = lvs.FWMarkKey(0x107, lvs.IPv6)
	services = ByVirtual(map[lvs.Key]Service{
		web:     {},
		sticky:  {Persistence: 300 * time.Second},
		dns6:    {},
		direct:  {Forward: lvs.DR},
		marked:  {Forward: lvs.Tunnel, Persistence: 90 * time.Second},
		marked6: {Persistence: 1500 * time.Millisecond},
		{Addr: netip.MustParseAddr("198.18.100.4"), Port: 80, Protocol: lvs.TCP}: {Forward: 9},
	})
)

// TestSendEntries: what the receiver gets for each kind of entry, field by
// field, and what is left out.
func TestSendEntries(t *testing.T) {
	for _, tc := range []struct {
		name string
		conn Conn
		want *wireConn // nil: left out
	}{
		{"established NAT connection: active, timeout the receiver's",
			Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1, Expires: 890 * time.Second},
			&wireConn{protocol: 6, flags: 0, state: 1, cport: 40000, vport: 80, dport: 80, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.1"), daddr: addr("198.18.3.11")}},
		{"SYN_RECV counts as active", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40001"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 3},
			&wireConn{protocol: 6, state: 3, cport: 40001, vport: 80, dport: 80, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.1"), daddr: addr("198.18.3.11")}},
		{"TIME_WAIT is inactive", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40002"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 5},
			&wireConn{protocol: 6, flags: flagInactive, state: 5, cport: 40002, vport: 80, dport: 80, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.1"), daddr: addr("198.18.3.11")}},
		{"template: TEMPLATE, inactive, the persistence timeout", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:0"), Virtual: ap("198.18.100.2:80"), Dest: ap("198.18.3.12:80"), Template: true, Expires: 12 * time.Second},
			&wireConn{protocol: 6, flags: flagTemplate | flagInactive, vport: 80, dport: 80, timeout: 300, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.2"), daddr: addr("198.18.3.12")}},
		{"IPv6 UDP: never active", Conn{Protocol: ProtoUDP, Client: ap("[2001:2:0:1::b]:5000"), Virtual: ap("[2001:2:0:100::1]:53"), Dest: ap("[2001:2:0:3::b]:53")},
			&wireConn{typ: 1, protocol: 17, flags: flagInactive, cport: 5000, vport: 53, dport: 53, caddr: addr("2001:2:0:1::b"), vaddr: addr("2001:2:0:100::1"), daddr: addr("2001:2:0:3::b")}},
		{"direct routing: DROUTE and NOOUTPUT", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40003"), Virtual: ap("198.18.100.3:443"), Dest: ap("198.18.3.11:443"), State: 1},
			&wireConn{protocol: 6, flags: flagDRoute | flagNoOutput, state: 1, cport: 40003, vport: 443, dport: 443, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.3"), daddr: addr("198.18.3.11")}},
		{"firewall-mark template: the mark, tunnel", Conn{Protocol: ProtoIP, Client: ap("198.18.1.11:0"), Virtual: ap("0.0.0.7:0"), Dest: ap("198.18.3.11:0"), Template: true, State: 1},
			&wireConn{flags: flagTunnel | flagNoOutput | flagTemplate | flagInactive, state: 1, fwmark: 7, timeout: 90, caddr: addr("198.18.1.11"), vaddr: addr("0.0.0.7"), daddr: addr("198.18.3.11")}},
		{"IPv6 firewall-mark template, timeout rounded up", Conn{Protocol: ProtoIP, Client: ap("[2001:2:0:1::b]:0"), Virtual: ap("[0:107:dead:beef::]:0"), Dest: ap("[2001:2:0:3::b]:0"), Template: true},
			&wireConn{typ: 1, flags: flagTemplate | flagInactive, fwmark: 0x107, timeout: 2, caddr: addr("2001:2:0:1::b"), vaddr: addr("0:107:dead:beef::"), daddr: addr("2001:2:0:3::b")}},
		{"template of a service not persistent: what it has left", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:0"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), Template: true, Expires: 0},
			&wireConn{protocol: 6, flags: flagTemplate | flagInactive, vport: 80, dport: 80, timeout: 1, caddr: addr("198.18.1.11"), vaddr: addr("198.18.100.1"), daddr: addr("198.18.3.11")}},
		{"no service", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.9:80"), Dest: ap("198.18.3.11:80"), State: 1}, nil},
		{"persistence-engine data", Conn{Protocol: ProtoUDP, Client: ap("198.18.1.11:5060"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), PEName: "sip"}, nil},
		{"IPv4 tunnel destination of an IPv6 service", Conn{Protocol: ProtoUDP, Client: ap("[2001:2:0:1::b]:5000"), Virtual: ap("[2001:2:0:100::1]:53"), Dest: ap("198.18.3.11:53")}, nil},
		{"unknown states", Conn{Protocol: 50, Client: ap("198.18.1.11:500"), Virtual: ap("198.18.100.1:500"), Dest: ap("198.18.3.11:500"), State: StateUnknown}, nil},
		{"unknown forwarding method", Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.4:80"), Dest: ap("198.18.3.11:80"), State: 1}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, p := newTestSender(1472, Options{})
			st, err := s.Send(context.Background(), seq(tc.conn), services)
			if err != nil {
				t.Fatal(err)
			}
			got := p.decoded(t)
			switch {
			case tc.want == nil && (len(got) != 0 || st.NoService+st.Unsupported != 1):
				t.Errorf("sent %+v (stats %+v), want it left out", got, st)
			case tc.want != nil && (len(got) != 1 || got[0] != *tc.want):
				t.Errorf("sent %+v\nwant [%+v]", got, *tc.want)
			}
		})
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// TestSendRoundTrip reads a table, sends it in messages of at most 1472
// bytes and decodes them: every entry arrives, in order, and the counts
// add up.
func TestSendRoundTrip(t *testing.T) {
	var table strings.Builder
	table.WriteString(connHeader + "\n")
	var want []Conn
	for i := range 1000 {
		c := Conn{Protocol: ProtoTCP, Client: netip.AddrPortFrom(addr("198.18.1.11"), uint16(20000+i)), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1}
		if i%3 == 0 {
			c.Client, c.Virtual, c.Dest = netip.AddrPortFrom(addr("2001:2:0:1::b"), uint16(20000+i)), ap("[2001:2:0:100::1]:53"), ap("[2001:2:0:3::b]:53")
			c.Protocol, c.State = ProtoUDP, 0
		}
		if i%100 == 0 {
			c.Client, c.Virtual, c.Template = netip.AddrPortFrom(c.Client.Addr(), 0), ap("198.18.100.2:80"), true
			c.Client = netip.AddrPortFrom(addr("198.18.1.11"), 0)
			c.Dest, c.Protocol = ap("198.18.3.11:80"), ProtoTCP
		}
		want = append(want, c)
		table.WriteString(kernelLine(c, layoutConn) + "\n")
	}
	table.WriteString(kernelLine(Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"), Virtual: ap("198.18.100.9:80"), Dest: ap("198.18.3.11:80"), State: 1}, layoutConn) + "\n")

	s, p := newTestSender(1472, Options{})
	st, err := s.Send(context.Background(), NewReader(strings.NewReader(table.String())).All(), services)
	if err != nil {
		t.Fatal(err)
	}
	got := p.decoded(t)
	if len(got) != len(want) {
		t.Fatalf("%d entries arrived, want %d", len(got), len(want))
	}
	bytes := 0
	for i, w := range got {
		c := want[i]
		if w.caddr != c.Client.Addr() || w.cport != c.Client.Port() || w.vaddr != c.Virtual.Addr() || w.daddr != c.Dest.Addr() ||
			w.protocol != uint8(c.Protocol) || (w.flags&flagTemplate != 0) != c.Template {
			t.Fatalf("entry %d: %+v, want %v", i, w, c)
		}
	}
	for _, m := range p.msgs {
		if len(m) > 1472 {
			t.Errorf("a message of %d bytes", len(m))
		}
		bytes += len(m)
	}
	wantStats := Stats{Read: 1001, Sent: 1000, Templates: 10, NoService: 1, Messages: len(p.msgs), Bytes: bytes}
	if st != wantStats {
		t.Errorf("stats %+v, want %+v", st, wantStats)
	}
	t.Logf("1000 entries (a third IPv6) in %d messages, %d bytes", len(p.msgs), bytes)
}

// TestSendLimit stops reading at the limit.
func TestSendLimit(t *testing.T) {
	var conns []Conn
	for i := range 10 {
		conns = append(conns, Conn{Protocol: ProtoTCP, Client: netip.AddrPortFrom(addr("198.18.1.11"), uint16(1000+i)), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1})
	}
	conns[1].Virtual = ap("198.18.100.9:80") // no service: not counted
	yielded := 0
	counting := func(yield func(Conn, error) bool) {
		for _, c := range conns {
			yielded++
			if !yield(c, nil) {
				return
			}
		}
	}
	s, p := newTestSender(1472, Options{Limit: 3})
	st, err := s.Send(context.Background(), counting, services)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.decoded(t); len(got) != 3 || !st.Truncated || st.Sent != 3 || st.NoService != 1 || yielded != 5 {
		t.Errorf("sent %d, stats %+v, read %d entries; want 3 sent, truncated at the 5th", len(got), st, yielded)
	}
}

// TestSendError: an error from the table ends Send once the entries read
// before it are sent.
func TestSendError(t *testing.T) {
	bad := errors.New("line 4: garbage")
	conns := func(yield func(Conn, error) bool) {
		for i := range 50 {
			if !yield(Conn{Protocol: ProtoTCP, Client: netip.AddrPortFrom(addr("198.18.1.11"), uint16(1000+i)), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1}, nil) {
				return
			}
		}
		yield(Conn{}, bad)
	}
	s, p := newTestSender(1472, Options{})
	st, err := s.Send(context.Background(), conns, services)
	if !errors.Is(err, bad) {
		t.Fatalf("error %v, want %v", err, bad)
	}
	if got := p.decoded(t); len(got) != 50 || st.Messages != 2 || st.Sent != 50 {
		t.Errorf("%d entries in %d messages arrived (stats %+v), want 50 in 2", len(got), len(p.msgs), st)
	}
}

// TestSendCanceled sends nothing once the context is done, and says so.
func TestSendCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, rate := range []int{-1, 0} {
		t.Run(fmt.Sprintf("rate %d", rate), func(t *testing.T) {
			p := &packets{}
			s := newSender(p, 42, 1472, Options{Rate: rate}, "test")
			_, err := s.Send(ctx, seq(Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80")}), services)
			if !errors.Is(err, context.Canceled) || len(p.msgs) != 0 {
				t.Errorf("error %v, %d messages; want context.Canceled and none", err, len(p.msgs))
			}
			if err := s.Close(); err != nil || !p.closed {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

// TestByVirtual resolves entries by their virtual server.
func TestByVirtual(t *testing.T) {
	svc := ByVirtual(map[lvs.Key]Service{
		{Addr: netip.MustParseAddr("::ffff:198.18.100.1"), Port: 80, Protocol: lvs.TCP}: {Persistence: time.Minute},
		{Addr: netip.MustParseAddr("198.18.100.1"), Port: 0, Protocol: lvs.UDP}:         {Forward: lvs.DR},
		lvs.FWMarkKey(7, lvs.IPv6): {},
		{Addr: netip.MustParseAddr("198.18.100.2"), Port: 2905, Protocol: lvs.SCTP}: {Persistence: time.Hour},
	})
	for _, tc := range []struct {
		name string
		c    Conn
		want Service
		ok   bool
	}{
		{"address service (key given IPv4-mapped)", Conn{Protocol: ProtoTCP, Virtual: ap("198.18.100.1:80"), Client: ap("198.18.1.1:1")}, Service{Persistence: time.Minute}, true},
		{"other protocol", Conn{Protocol: ProtoUDP, Virtual: ap("198.18.100.1:80"), Client: ap("198.18.1.1:1")}, Service{}, false},
		{"template of a port-0 service", Conn{Protocol: ProtoUDP, Virtual: ap("198.18.100.1:0"), Client: ap("198.18.1.1:0"), Template: true}, Service{Forward: lvs.DR}, true},
		{"IPv6 firewall-mark template: the mark set", Conn{Protocol: ProtoIP, Virtual: ap("[0:7::]:0"), Client: ap("[2001:2::1]:0"), Template: true}, Service{FWMark: 7}, true},
		{"IPv4 template of that mark", Conn{Protocol: ProtoIP, Virtual: ap("0.0.0.7:0"), Client: ap("198.18.1.1:0"), Template: true}, Service{}, false},
		{"SCTP", Conn{Protocol: ProtoSCTP, Virtual: ap("198.18.100.2:2905"), Client: ap("198.18.1.1:1")}, Service{Persistence: time.Hour}, true},
		{"SCTP to a TCP service's port", Conn{Protocol: ProtoSCTP, Virtual: ap("198.18.100.1:80"), Client: ap("198.18.1.1:1")}, Service{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := svc(tc.c)
			if got != tc.want || ok != tc.ok {
				t.Errorf("got %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestSendTooSmall: an entry no message can carry is an error, not a
// silent loss (Dial never makes such a sender).
func TestSendTooSmall(t *testing.T) {
	s, p := newTestSender(60, Options{})
	_, err := s.Send(context.Background(), seq(
		Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1},
		Conn{Protocol: ProtoUDP, Client: ap("[2001:2:0:1::b]:5000"), Virtual: ap("[2001:2:0:100::1]:53"), Dest: ap("[2001:2:0:3::b]:53")}), services)
	if err == nil || !strings.Contains(err.Error(), "does not fit in a message of 60 bytes") || len(p.msgs) != 1 {
		t.Errorf("error %v after %d messages; want the IPv6 entry refused after the IPv4 one was sent", err, len(p.msgs))
	}
}
