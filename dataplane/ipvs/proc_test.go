package ipvs

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

func TestParseProcIPVS(t *testing.T) {
	// As printed by Linux 6.1 (net/netfilter/ipvs/ip_vs_ctl.c); the second
	// block of 192.0.2.10:80 is what a chunked read can repeat.
	text := `IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port Forward Weight ActiveConn InActConn
TCP  C000020A:0050 wrr 
  -> 0A00000B:1F90      Masq    3      2          7         
  -> 0A00000C:1F90      Masq    0      0          0         
  -> 0A00000E:0050      Route   2      0          0         
  -> 0A00000F:0050      Tunnel  1      0          0         
FWM  00000001 rr 
  -> 0A00000D:0050      Masq    1      0          0         
UDP  C0000235:0035 rr 
SCTP C000020A:0B59 rr 
  -> 0A00000B:0B59      Masq    1      4          1         
  -> 0A00000C:0B59      Route   1      0          0         
TCP  C000020A:0050 wrr 
  -> 0A0000FF:1F90      Masq    9      0          0         
TCP  [2001:0db8:0000:0000:0000:0000:0000:0010]:01BB rr persistent 10800 ffffffff
  -> [2001:0db8:0001:0000:0000:0000:0000:0005]:01BB      Masq    1      0          1         
`
	got, err := parseProcIPVS(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[lvs.Key][]Dest{
		{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}: {
			{Addr: netip.MustParseAddrPort("10.0.0.11:8080"), Weight: 3, ActiveConns: 2, InactiveConns: 7},
			{Addr: netip.MustParseAddrPort("10.0.0.12:8080"), Weight: 0},
			{Addr: netip.MustParseAddrPort("10.0.0.14:80"), Weight: 2, Forward: lvs.Forward{Method: lvs.DR}},
			{Addr: netip.MustParseAddrPort("10.0.0.15:80"), Weight: 1, Forward: lvs.Forward{Method: lvs.Tunnel}},
		},
		// Listed without destinations: present, so not read again.
		{Addr: netip.MustParseAddr("192.0.2.53"), Port: 53, Protocol: lvs.UDP}: nil,
		{Addr: netip.MustParseAddr("192.0.2.10"), Port: 2905, Protocol: lvs.SCTP}: {
			{Addr: netip.MustParseAddrPort("10.0.0.11:2905"), Weight: 1, ActiveConns: 4, InactiveConns: 1},
			{Addr: netip.MustParseAddrPort("10.0.0.12:2905"), Weight: 1, Forward: lvs.Forward{Method: lvs.DR}},
		},
		{Addr: netip.MustParseAddr("2001:db8::10"), Port: 443, Protocol: lvs.TCP}: {
			{Addr: netip.MustParseAddrPort("[2001:db8:1::5]:443"), Weight: 1, InactiveConns: 1},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestParseProcIPVSRejectsGarbage(t *testing.T) {
	for _, text := range []string{
		"h\nh\nh\nTCP  ZZZZ:0050 rr\n",
		"h\nh\nh\nTCP  C000020A:0050 rr\n  -> 0A00000B:1F90 Masq x 0 0\n",
	} {
		if _, err := parseProcIPVS(strings.NewReader(text)); err == nil {
			t.Errorf("no error for %q", text)
		}
	}
}
