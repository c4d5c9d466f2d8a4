package ipvs

import (
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
