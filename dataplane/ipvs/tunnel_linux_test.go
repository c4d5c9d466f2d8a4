package ipvs

import (
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/lvs"
	"golang.org/x/sys/unix"
)

// A destination request encodes the encapsulation, and a dump answer in
// the same attributes decodes to the same forwarding; the kernel's
// 16-byte address union reads as IPv4 by the family attribute.
func TestTunnelDestRoundTrip(t *testing.T) {
	key := lvs.Key{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Protocol: lvs.TCP}
	for _, tt := range []struct {
		name string
		d    Dest
	}{
		{"gue with port and checksum", Dest{Addr: netip.MustParseAddrPort("198.18.3.11:80"),
			Forward: lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080, Checksum: lvs.RemoteChecksum}}},
		{"gre with checksum", Dest{Addr: netip.MustParseAddrPort("198.18.3.12:80"),
			Forward: lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE, Checksum: lvs.Checksummed}}},
		{"ipip", Dest{Addr: netip.MustParseAddrPort("198.18.3.13:80"), Forward: lvs.Forward{Method: lvs.Tunnel}}},
		{"direct routing", Dest{Addr: netip.MustParseAddrPort("198.18.3.14:80"), Forward: lvs.Forward{Method: lvs.DR}}},
		{"ipv6 gue", Dest{Addr: netip.MustParseAddrPort("[2001:2:0:3::11]:80"),
			Forward: lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 5555}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := &batchWriter{family: 42}
			w.seq = 7
			encodeDest(w, ipvsCmdSetDest, &Service{Key: key}, &tt.d, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
			var msgs []genl.Message
			for m := range genl.Messages(w.Encoded()) {
				msgs = append(msgs, m)
			}
			if len(msgs) != 1 || msgs[0].Type != 42 || msgs[0].Seq != 7 || msgs[0].Payload[0] != ipvsCmdSetDest {
				t.Fatalf("messages %+v; want one SET_DEST of family 42, seq 7", msgs)
			}
			addr, f, err := decodeDestMessage(msgs[0].Payload)
			if err != nil {
				t.Fatal(err)
			}
			if addr != tt.d.Addr || f != tt.d.Forward {
				t.Errorf("decoded %s %+v; want %s %+v", addr, f, tt.d.Addr, tt.d.Forward)
			}
		})
	}
}

// The kernel answers an IPv4 destination's address as its 16-byte union.
func TestDecodeDestKernelUnion(t *testing.T) {
	var e genl.Encoder
	start := e.Begin(42, 0, 1, ipvsCmdGetDest, ipvsGenlVersion)
	nest := e.BeginNested(ipvsCmdAttrDest)
	e.Bytes(ipvsDestAttrAddress, []byte{198, 18, 3, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	e.BE16(ipvsDestAttrPort, 80)
	e.U32(ipvsDestAttrForwardingMethod, ipvsConnFlagTunnel)
	e.U16(ipvsDestAttrAddressFamily, unix.AF_INET)
	e.U8(ipvsDestAttrTunType, uint8(lvs.GRE))
	e.BE16(ipvsDestAttrTunPort, 0)
	e.U16(ipvsDestAttrTunFlags, uint16(lvs.NoChecksum))
	e.EndNested(nest)
	e.End(start)
	for m := range genl.Messages(e.Encoded()) {
		addr, f, err := decodeDestMessage(m.Payload)
		if err != nil || addr != netip.MustParseAddrPort("198.18.3.11:80") || f != (lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE}) {
			t.Errorf("decoded %s %+v %v; want 198.18.3.11:80 over GRE", addr, f, err)
		}
	}
	if _, _, err := decodeDestMessage([]byte{1, 2}); err == nil {
		t.Error("a short message decoded")
	}
}

func TestPlainTunnel(t *testing.T) {
	for _, tt := range []struct {
		f    lvs.Forward
		want bool
	}{
		{lvs.Forward{}, true},
		{lvs.Forward{Method: lvs.DR}, true},
		{lvs.Forward{Method: lvs.Tunnel}, true},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080}, false},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE}, false},
	} {
		if got := plainTunnel(Dest{Forward: tt.f}); got != tt.want {
			t.Errorf("plainTunnel(%v) = %v, want %v", tt.f, got, tt.want)
		}
	}
}
