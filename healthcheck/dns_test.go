package healthcheck

import (
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/lbdproject/lbd/config"
)

// dnsTestServer is a small DNS responder on 127.0.0.1, UDP and TCP on one
// port, whose answers depend on the name asked (see dnsTestReply).
type dnsTestServer struct {
	addr     netip.AddrPort
	udp, tcp atomic.Int64 // queries received
}

func dnsTestStart(t testing.TB) *dnsTestServer {
	t.Helper()
	s := &dnsTestServer{}
	var (
		uc  *net.UDPConn
		l   net.Listener
		err error
	)
	// UDP and TCP on the same port, as a DNS server is; retry if another
	// test took the TCP port meanwhile.
	for range 20 {
		uc, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		s.addr = checkerTestAddr(uc.LocalAddr())
		if l, err = net.Listen("tcp", s.addr.String()); err == nil {
			break
		}
		uc.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		uc.Close()
		l.Close()
	})
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := uc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			s.udp.Add(1)
			if out := dnsTestReply(buf[:n], false); out != nil {
				uc.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				var n [2]byte
				if _, err := io.ReadFull(c, n[:]); err != nil {
					return
				}
				q := make([]byte, binary.BigEndian.Uint16(n[:]))
				if _, err := io.ReadFull(c, q); err != nil {
					return
				}
				s.tcp.Add(1)
				out := dnsTestReply(q, true)
				if out == nil {
					io.Copy(io.Discard, c) // until the checker gives up
					return
				}
				c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out))))
				c.Write(out)
			}()
		}
	}()
	return s
}

// dnsTestReply answers query, received over TCP or UDP; nil is no answer.
func dnsTestReply(query []byte, overTCP bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil
	}
	q, err := p.Question()
	if err != nil {
		return nil
	}
	m := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired},
		Questions: []dnsmessage.Question{q},
	}
	rr := func(name string, body dnsmessage.ResourceBody) dnsmessage.Resource {
		return dnsmessage.Resource{
			Header: dnsmessage.ResourceHeader{Name: dnsmessage.MustNewName(name), Class: dnsmessage.ClassINET, TTL: 60},
			Body:   body,
		}
	}
	a := func(name, ip string) dnsmessage.Resource {
		return rr(name, &dnsmessage.AResource{A: netip.MustParseAddr(ip).As4()})
	}
	name := strings.ToLower(q.Name.String())
	switch name {
	case "ok.test.":
		switch q.Type {
		case dnsmessage.TypeA:
			m.Answers = []dnsmessage.Resource{a(name, "192.0.2.1"), a(name, "192.0.2.2")}
		case dnsmessage.TypeAAAA:
			m.Answers = []dnsmessage.Resource{rr(name, &dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::1").As16()})}
		case dnsmessage.TypeTXT:
			m.Answers = []dnsmessage.Resource{rr(name, &dnsmessage.TXTResource{TXT: []string{"v=health ", "status=OK"}})}
		case dnsmessage.TypeMX:
			m.Answers = []dnsmessage.Resource{rr(name, &dnsmessage.MXResource{Pref: 10, MX: dnsmessage.MustNewName("Mail.Test.")})}
		case dnsmessage.TypeSRV:
			m.Answers = []dnsmessage.Resource{rr(name, &dnsmessage.SRVResource{Priority: 1, Weight: 5, Port: 8080, Target: dnsmessage.MustNewName("web.test.")})}
		}
	case "cname.test.":
		m.Answers = []dnsmessage.Resource{
			rr(name, &dnsmessage.CNAMEResource{CNAME: dnsmessage.MustNewName("target.test.")}),
			a("target.test.", "192.0.2.3"),
		}
	case "many.test.":
		for _, ip := range []string{"192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.14", "192.0.2.15"} {
			m.Answers = append(m.Answers, a(name, ip))
		}
	case "empty.test.":
	case "nx.test.":
		m.RCode = dnsmessage.RCodeNameError
	case "fail.test.":
		m.RCode = dnsmessage.RCodeServerFailure
	case "refused.test.":
		// Some servers leave the question out of an error reply.
		m.RCode, m.Questions = dnsmessage.RCodeRefused, nil
	case "big.test.", "tcp-silent.test.", "always-truncated.test.":
		if overTCP && name == "tcp-silent.test." {
			return nil
		}
		if overTCP && name != "always-truncated.test." {
			m.Answers = []dnsmessage.Resource{a(name, "192.0.2.7")}
			break
		}
		m.Truncated = true
		if overTCP {
			m.RCode = dnsmessage.RCodeServerFailure
		}
	case "badid.test.":
		m.ID++
	case "notresponse.test.":
		m.Response = false
	case "other.test.":
		m.Questions[0].Name = dnsmessage.MustNewName("elsewhere.test.")
		m.Answers = []dnsmessage.Resource{a("elsewhere.test.", "192.0.2.1")}
	case "garbage.test.":
		return []byte{0xde, 0xad}
	case "silent.test.":
		return nil
	default:
		m.RCode = dnsmessage.RCodeNameError
	}
	out, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return out
}

func TestDNSCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		qname   string
		qtype   string
		rcode   string
		answer  string
		timeout time.Duration
		want    string
		wantTCP bool // the check must have used TCP
	}{
		{name: "NOERROR with A", qname: "ok.test.", want: ""},
		{name: "name without final dot", qname: "ok.test", want: ""},
		{name: "name in other case", qname: "OK.Test.", want: ""},
		{name: "A answer", qname: "ok.test.", answer: "192.0.2.2", want: ""},
		{name: "wrong A answer", qname: "ok.test.", answer: "192.0.2.9", want: `no answer contains "192.0.2.9": answers are 192.0.2.1, 192.0.2.2`},
		{name: "many wrong answers", qname: "many.test.", answer: "192.0.2.9", want: "answers are 192.0.2.11, 192.0.2.12, 192.0.2.13, …"},
		{name: "no answers", qname: "empty.test.", answer: "192.0.2.1", want: `no answer contains "192.0.2.1": no answers`},
		{name: "no answers expected none", qname: "empty.test.", want: ""},
		{name: "AAAA answer", qname: "ok.test.", qtype: "AAAA", answer: "2001:DB8::1", want: ""},
		{name: "TXT answer across strings", qname: "ok.test.", qtype: "TXT", answer: "health status=OK", want: ""},
		{name: "TXT is case-sensitive", qname: "ok.test.", qtype: "TXT", answer: "status=ok", want: "no answer contains"},
		{name: "MX answer", qname: "ok.test.", qtype: "MX", answer: "10 mail.test.", want: ""},
		{name: "SRV answer", qname: "ok.test.", qtype: "SRV", answer: "8080 web.test.", want: ""},
		{name: "CNAME target", qname: "cname.test.", answer: "target.test.", want: ""},
		{name: "A behind CNAME", qname: "cname.test.", answer: "192.0.2.3", want: ""},
		{name: "NXDOMAIN", qname: "nx.test.", want: "rcode NXDOMAIN, expected NOERROR"},
		{name: "NXDOMAIN expected", qname: "nx.test.", rcode: "NXDOMAIN", want: ""},
		{name: "SERVFAIL", qname: "fail.test.", want: "rcode SERVFAIL, expected NOERROR"},
		{name: "NOERROR not expected", qname: "ok.test.", rcode: "NXDOMAIN", want: "rcode NOERROR, expected NXDOMAIN"},
		{name: "REFUSED without question", qname: "refused.test.", want: "rcode REFUSED, expected NOERROR"},
		{name: "truncated then TCP", qname: "big.test.", answer: "192.0.2.7", want: "", wantTCP: true},
		{name: "truncated over TCP too", qname: "always-truncated.test.", want: "rcode SERVFAIL", wantTCP: true},
		{name: "truncated, TCP silent", qname: "tcp-silent.test.", timeout: 500 * time.Millisecond, want: "TCP wait for reply: timeout after 500ms", wantTCP: true},
		{name: "wrong ID", qname: "badid.test.", want: "does not match query ID"},
		{name: "not a response", qname: "notresponse.test.", want: "reply is not a response"},
		{name: "another question", qname: "other.test.", want: "reply is for another question"},
		{name: "garbage", qname: "garbage.test.", want: "malformed reply"},
		{name: "no reply", qname: "silent.test.", timeout: 500 * time.Millisecond, want: "wait for reply: timeout after 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := dnsTestStart(t)
			hc := checkerTestHC(config.CheckDNS)
			hc.QueryName, hc.ExpectAnswer = tt.qname, tt.answer
			if tt.qtype != "" {
				hc.QueryType = tt.qtype
			}
			if tt.rcode != "" {
				hc.ExpectRcode = tt.rcode
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: srv.addr}, timeout)
			checkerTestWant(t, err, tt.want)
			if udp, tcp := srv.udp.Load(), srv.tcp.Load(); udp != 1 || (tcp == 1) != tt.wantTCP || tcp > 1 {
				t.Errorf("server got %d queries over UDP and %d over TCP; want 1 over UDP and TCP: %t", udp, tcp, tt.wantTCP)
			}
			t.Logf("%v after %s", err, elapsed)
		})
	}
}

// TestDNSCheckRandomID: each query has its own ID.
func TestDNSCheckRandomID(t *testing.T) {
	t.Parallel()
	ids := make(chan uint16, 100)
	srv := udpTestServer(t, func(q []byte) []byte {
		ids <- binary.BigEndian.Uint16(q)
		return dnsTestReply(q, false)
	})
	hc := checkerTestHC(config.CheckDNS)
	hc.QueryName = "ok.test."
	c := checkerTestNew(t, hc)
	seen := map[uint16]bool{}
	for range 20 {
		err, _ := checkerTestRun(t, c, Target{Addr: srv}, 2*time.Second)
		checkerTestWant(t, err, "")
		seen[<-ids] = true
	}
	// 20 random 16-bit IDs collide with a probability below 1%; allow
	// one collision anyway.
	if len(seen) < 19 {
		t.Errorf("20 queries used %d distinct IDs", len(seen))
	}
}

// TestDNSCheckRefused: a closed port fails at once, as for UDP checks.
func TestDNSCheckRefused(t *testing.T) {
	t.Parallel()
	hc := checkerTestHC(config.CheckDNS)
	hc.QueryName = "ok.test."
	err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: checkerTestClosedPort(t, "udp")}, 5*time.Second)
	checkerTestWant(t, err, "connection refused")
	if elapsed > 2*time.Second {
		t.Errorf("refused check took %s", elapsed)
	}
}
