package connsync

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/syncd"
)

// TestDial opens senders on the loopback link (no peer hears them: the
// e2e test TestConnSync does) and checks the bound on message length.
func TestDial(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      syncd.Daemon
		maxLen int
		err    string
	}{
		{"kernel defaults", syncd.Daemon{Interface: "lo", SyncID: 42}, 1472, ""},
		{"maxlen given", syncd.Daemon{Interface: "lo", MaxLen: 1200, Port: 9000, TTL: 2}, 1200, ""},
		{"maxlen too small for an IPv6 entry", syncd.Daemon{Interface: "lo", MaxLen: 79}, 0, "cannot carry an IPv6 entry"},
		{"no such interface", syncd.Daemon{Interface: "nosuch0"}, 0, "sync interface nosuch0"},
		{"unicast group", syncd.Daemon{Interface: "lo", Group: netip.MustParseAddr("198.18.0.1")}, 0, "not a multicast address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Dial("", tc.d, Options{})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.MaxLen() != tc.maxLen {
				t.Errorf("MaxLen %d, want %d", s.MaxLen(), tc.maxLen)
			}
			st, err := s.Send(context.Background(), seq(Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"),
				Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1}), services)
			if err != nil || st.Messages != 1 || st.Bytes != 44 {
				t.Errorf("sending one entry: %+v, %v", st, err)
			}
		})
	}
}

// TestOpenTableWithoutIPVS: on a kernel without IPVS (this host's,
// usually), OpenTable says so.
func TestOpenTableWithoutIPVS(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs_conn"); err == nil {
		t.Skip("this kernel has IPVS")
	}
	_, err := OpenTable("")
	if err == nil || !strings.Contains(err.Error(), "the kernel has no IPVS") {
		t.Errorf("error %v, want one saying IPVS is missing", err)
	}
}
