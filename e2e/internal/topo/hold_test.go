package topo

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseHoldOutput(t *testing.T) {
	out := strings.Join([]string{
		"conn 0 198.18.1.11:40000",
		"answer 0 id=rs1 client=198.18.1.11:40000",
		"conn 1 198.18.1.11:40002",
		"answer 1 id=rs2 client=198.18.1.11:40002",
		"answer 0 id=rs1 client=198.18.1.11:40000",
		"gap 0 120 0",
		"error 1 read tcp: connection reset by peer",
		"gap 1 3400 1700000000000000000",
		"asked 1",
		"answer 1 id=rs2 client=198.18.1.11:40002", // an ask still being answered
	}, "\n")
	rep, err := parseHoldOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.conns) != 2 || rep.conns[1] != netip.MustParseAddrPort("198.18.1.11:40002") {
		t.Errorf("conns = %v", rep.conns)
	}
	if len(rep.first) != 2 || rep.first[0].Server != "rs1" || rep.first[1].Server != "rs2" {
		t.Errorf("first = %+v", rep.first)
	}
	if len(rep.asks) != 1 {
		t.Fatalf("%d asks, want 1 (the second is not closed)", len(rep.asks))
	}
	conns := []HeldConn{{Server: "rs1"}, {Server: "rs2"}}
	for i, tc := range []struct {
		lost    bool
		longest time.Duration
	}{{false, 120 * time.Millisecond}, {true, 3400 * time.Millisecond}} {
		x := rep.asks[0][i]
		if x.Lost(conns[i]) != tc.lost || x.Longest != tc.longest || x.FailedAt.IsZero() != !tc.lost {
			t.Errorf("ask 1, connection %d: %+v (lost %v), want lost %v, longest %v", i, x, x.Lost(conns[i]), tc.lost, tc.longest)
		}
	}
}

func TestParseHoldOutputRefusesAShortAsk(t *testing.T) {
	out := "conn 0 198.18.1.11:40000\nanswer 0 id=rs1 client=198.18.1.11:40000\nconn 1 198.18.1.11:40002\n" +
		"answer 1 id=rs1 client=198.18.1.11:40002\nanswer 0 id=rs1 client=198.18.1.11:40000\nasked 1\n"
	if _, err := parseHoldOutput(out); err == nil {
		t.Error("an ask that answered one of two connections was accepted")
	}
}

func TestParseProbeOutputTimed(t *testing.T) {
	out := "timed 1000000000 1020000000 answer id=rs1 client=198.18.1.11:40000\n" +
		"timed 1010000000 2010000000 error read: connection reset by peer\n"
	as, err := parseProbeOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Server != "rs1" || as[0].End.Sub(as[0].Start) != 20*time.Millisecond {
		t.Errorf("answers = %+v", as)
	}
	if as[1].Err != "read: connection reset by peer" || !as[1].End.Equal(time.Unix(2, 10000000)) {
		t.Errorf("the failure = %+v", as[1])
	}
	for _, bad := range []string{"timed 1 answer id=rs1", "timed x 2 answer id=rs1", "timed 1 2 timed 1 2 answer id=rs1"} {
		if _, err := parseProbeOutput(bad); err == nil {
			t.Errorf("parseProbeOutput(%q): no error", bad)
		}
	}
}

// A push connection reads the server's lines without sending anything,
// and is lost once the server stops.
func TestHeldPushConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = servePush(ln, "rs1", 10*time.Millisecond) }()
	c, err := dialHeld(ln.Addr().String(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.reset()
	if x := c.first(); x.err != nil || !strings.HasPrefix(x.body, "id=rs1 client=127.0.0.1:") || !strings.HasSuffix(x.body, " seq=1") {
		t.Fatalf("first line: %+v", x)
	}
	go c.read()
	x := c.ask()
	if x.err != nil || strings.HasSuffix(x.body, " seq=1") {
		t.Fatalf("ask: %+v, want a later line", x)
	}
	a, err := parseAnswer(x.body)
	if err != nil || a.Server != "rs1" {
		t.Errorf("the pushed line %q reads as %+v (%v)", x.body, a, err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
}

// A ticking client-first connection answers asks between its own
// requests and records the longest gap.
func TestHeldTickingConnection(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("id=rs2 client=" + r.RemoteAddr + "\n"))
	}))
	defer srv.Close()
	c, err := dialHeld(strings.TrimPrefix(srv.URL, "http://"), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.reset()
	if x := c.first(); x.err != nil || x.longest != 0 {
		t.Fatalf("first request: %+v", x)
	}
	go c.tick(5 * time.Millisecond)
	time.Sleep(30 * time.Millisecond)
	x := c.ask()
	if x.err != nil || !strings.HasPrefix(x.body, "id=rs2 ") || x.longest <= 0 {
		t.Errorf("ask: %+v", x)
	}
	c.reset()
	if x := c.ask(); x.err == nil {
		t.Errorf("ask on a closed connection: %+v, want its error", x)
	} else if again := c.ask(); again.err != x.err {
		t.Errorf("a failed connection reported %v, then %v: want its first error", x.err, again.err)
	}
}
