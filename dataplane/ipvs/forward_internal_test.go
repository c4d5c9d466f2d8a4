package ipvs

import (
	"net/netip"
	"testing"
	"unsafe"

	"github.com/lbdproject/lbd/lvs"
)

func TestPackedForward(t *testing.T) {
	for _, m := range []lvs.Method{lvs.NAT, lvs.DR, lvs.Tunnel} {
		for _, e := range []lvs.Encap{lvs.IPIP, lvs.GUE, lvs.GRE} {
			for _, c := range []lvs.Checksum{lvs.NoChecksum, lvs.Checksummed, lvs.RemoteChecksum} {
				for _, port := range []uint16{0, 6080, 65535} {
					f := lvs.Forward{Method: m, Tunnel: e, Checksum: c, Port: port}
					if got := pack(f).unpack(); got != f {
						t.Errorf("pack(%+v).unpack() = %+v", f, got)
					}
				}
			}
		}
	}
	if pack(lvs.Forward{Method: lvs.DR}) == pack(lvs.Forward{}) {
		t.Error("DR and NAT pack alike")
	}
}

// TestDestStateSize guards the cache's per-destination cost.
func TestDestStateSize(t *testing.T) {
	if got := unsafe.Sizeof(destState{}); got != 56 {
		t.Errorf("destState is %d bytes; want 56", got)
	}
}

// TestIpvsadmKey checks how a foreign virtual server's error tells the
// admin to name it to ipvsadm.
func TestIpvsadmKey(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.1")
	for _, tc := range []struct {
		key  lvs.Key
		want string
	}{
		{lvs.Key{Addr: a, Port: 80, Protocol: lvs.TCP}, "-t 198.18.0.1:80"},
		{lvs.Key{Addr: a, Port: 53, Protocol: lvs.UDP}, "-u 198.18.0.1:53"},
		{lvs.Key{Addr: a, Port: 2905, Protocol: lvs.SCTP}, "--sctp-service 198.18.0.1:2905"},
		{lvs.Key{Addr: netip.MustParseAddr("2001:2::1"), Port: 2905, Protocol: lvs.SCTP}, "--sctp-service [2001:2::1]:2905"},
		{lvs.FWMarkKey(7, lvs.IPv4), "-f 7"},
	} {
		if got := ipvsadmKey(tc.key); got != tc.want {
			t.Errorf("ipvsadmKey(%v) = %q, want %q", tc.key, got, tc.want)
		}
	}
}
