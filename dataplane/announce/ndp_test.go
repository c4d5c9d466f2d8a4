package announce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

var (
	vip6    = netip.MustParseAddr("2001:2::10")
	vip6b   = netip.MustParseAddr("2001:2::11")
	asker6  = netip.MustParseAddr("2001:2::2")
	askerLL = netip.MustParseAddr("fe80::2")
	other6  = netip.MustParseAddr("2001:2::99")
	// snm is vip6's solicited-node multicast group and snmMAC its MAC.
	snm    = netip.MustParseAddr("ff02::1:ff00:10")
	snmMAC = net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x10}
)

// ns describes a neighbour solicitation frame; the zero values of the
// optional fields take the usual multicast solicitation for vip6 from
// asker6 with its link-layer address.
type ns struct {
	ethDst, ethSrc net.HardwareAddr
	src, dst       netip.Addr
	hop            uint8
	target         netip.Addr
	slla           net.HardwareAddr
	noSLLA         bool
}

func (o ns) packet() *ndpPacket {
	p := &ndpPacket{ethDst: o.ethDst, ethSrc: o.ethSrc, src: o.src, dst: o.dst, hopLimit: o.hop}
	if p.ethDst == nil {
		p.ethDst = snmMAC
	}
	if p.ethSrc == nil {
		p.ethSrc = askerMAC
	}
	if !p.src.IsValid() {
		p.src = asker6
	}
	if !p.dst.IsValid() {
		p.dst = snm
	}
	if p.hopLimit == 0 {
		p.hopLimit = 255
	}
	m := &ndp.NeighborSolicitation{TargetAddress: o.target}
	if !m.TargetAddress.IsValid() {
		m.TargetAddress = vip6
	}
	if slla := cmpOr(o.slla, askerMAC); !o.noSLLA {
		m.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: slla}}
	}
	p.msg = m
	return p
}

func cmpOr(a, b net.HardwareAddr) net.HardwareAddr {
	if a != nil {
		return a
	}
	return b
}

func mustMarshal(t *testing.T, p *ndpPacket) []byte {
	t.Helper()
	b, err := p.marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (o ns) frame(t *testing.T) []byte { t.Helper(); return mustMarshal(t, o.packet()) }

// corrupt returns frame with the byte at off (from the start of the
// frame) changed by f.
func corrupt(frame []byte, off int, f func(byte) byte) []byte {
	b := slices.Clone(frame)
	b[off] = f(b[off])
	return b
}

const icmpOff = ethernetHeaderLen + ipv6HeaderLen

func TestDecide6AnswersOnlyValidSolicitationsForItsVIPs(t *testing.T) {
	vips := vipSet{vip, vip6, vip6b}
	unspec := netip.IPv6Unspecified()
	na := func(from net.HardwareAddr, target netip.Addr) []byte {
		return mustMarshal(t, advertisement(from, target, allNodesMAC(), netip.IPv6LinkLocalAllNodes(), false))
	}
	valid := ns{}.frame(t)
	tagged := func() []byte {
		var f ethernet.Frame
		if err := f.UnmarshalBinary(valid); err != nil {
			t.Fatal(err)
		}
		f.VLAN = &ethernet.VLAN{ID: 100}
		b, _ := f.MarshalBinary()
		return b
	}()
	for _, tc := range []struct {
		name  string
		frame []byte
		want  verdict
	}{
		{"multicast solicitation for a VIP", valid, answer},
		{"from a link-local address", ns{src: askerLL}.frame(t), answer},
		{"unicast solicitation to the VIP (reachability probe)", ns{ethDst: ourMAC, dst: vip6}.frame(t), answer},
		{"unicast probe without a source link-layer address", ns{ethDst: ourMAC, dst: vip6, noSLLA: true}.frame(t), answer},
		{"duplicate address detection for a VIP", ns{src: unspec, noSLLA: true}.frame(t), answer},
		{"another VIP in the set", ns{target: vip6b, dst: netip.MustParseAddr("ff02::1:ff00:11"), ethDst: net.HardwareAddr{0x33, 0x33, 0xff, 0, 0, 0x11}}.frame(t), answer},
		{"solicitation for another address", ns{target: other6, dst: netip.MustParseAddr("ff02::1:ff00:99")}.frame(t), ignoreNotVIP},
		{"hop limit 254", ns{hop: 254}.frame(t), ignoreHopLimit},
		{"hop limit 64", ns{hop: 64}.frame(t), ignoreHopLimit},
		{"hop limit 1", ns{hop: 1}.frame(t), ignoreHopLimit},
		{"to another group than the target's", ns{dst: netip.IPv6LinkLocalAllNodes(), ethDst: allNodesMAC()}.frame(t), ignoreNotForUs},
		{"unicast to another address", ns{ethDst: ourMAC, dst: other6}.frame(t), ignoreNotForUs},
		{"unicast to another MAC", ns{ethDst: askerMAC, dst: vip6}.frame(t), ignoreNotForUs},
		{"sent by this interface", ns{ethSrc: ourMAC, slla: ourMAC}.frame(t), ignoreFromSelf},
		{"our MAC as source link-layer address", ns{slla: ourMAC}.frame(t), ignoreFromSelf},
		{"another host solicits from our VIP", ns{src: vip6b}.frame(t), conflict},
		{"another host advertises our VIP", na(askerMAC, vip6), conflict},
		{"another host advertises another address", na(askerMAC, other6), ignoreNotRequest},
		{"our own unsolicited advertisement", na(ourMAC, vip6), ignoreFromSelf},
		{"duplicate address detection with a source link-layer address", ns{src: unspec}.frame(t), ignoreMalformed},
		{"duplicate address detection to the target itself", ns{src: unspec, dst: vip6, ethDst: ourMAC, noSLLA: true}.frame(t), ignoreMalformed},
		{"multicast target", ns{target: netip.IPv6LinkLocalAllNodes(), dst: netip.MustParseAddr("ff02::1:ff00:1")}.frame(t), ignoreMalformed},
		{"group address as source link-layer address", ns{slla: ethernet.Broadcast}.frame(t), ignoreMalformed},
		{"group address as Ethernet source", ns{ethSrc: snmMAC}.frame(t), ignoreMalformed},
		{"multicast source address", ns{src: netip.IPv6LinkLocalAllNodes()}.frame(t), ignoreMalformed},
		{"bad checksum", corrupt(valid, icmpOff+2, func(b byte) byte { return b ^ 1 }), ignoreMalformed},
		{"altered target", corrupt(valid, icmpOff+23, func(b byte) byte { return b ^ 1 }), ignoreMalformed},
		{"ICMPv6 code 1", corrupt(valid, icmpOff+1, func(byte) byte { return 1 }), ignoreMalformed},
		{"extension header before ICMPv6", corrupt(valid, ethernetHeaderLen+6, func(byte) byte { return 0 }), ignoreMalformed},
		{"IPv4 version", corrupt(valid, ethernetHeaderLen, func(byte) byte { return 0x45 }), ignoreMalformed},
		{"payload length beyond the frame", corrupt(valid, ethernetHeaderLen+5, func(b byte) byte { return b + 1 }), ignoreMalformed},
		{"truncated", valid[:len(valid)-4], ignoreMalformed},
		{"VLAN-tagged frame", tagged, ignoreMalformed},
		{"ARP", frame(t, ethernet.Broadcast, askerMAC, 1, askerMAC, asker, make(net.HardwareAddr, 6), vip), ignoreMalformed},
		{"short frame", []byte{1, 2, 3}, ignoreMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, p := decide6(tc.frame, ourMAC, vips)
			if got != tc.want {
				t.Fatalf("decide6 = %v, want %v", got, tc.want)
			}
			if (got == answer || got == conflict) && p == nil {
				t.Fatalf("decide6 = %v without a packet", got)
			}
		})
	}
}

func TestDecide6AnswerIsAnAdvertisementFromTheVIPWithOurMAC(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ns        ns
		ethDst    net.HardwareAddr
		dst       netip.Addr
		solicited bool
	}{
		{"multicast solicitation: unicast to the asker's link-layer address", ns{}, askerMAC, asker6, true},
		{"link-local asker", ns{src: askerLL}, askerMAC, askerLL, true},
		{"option and frame disagree: the option wins", ns{ethSrc: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}}, askerMAC, asker6, true},
		{"no option: the frame's source", ns{ethDst: ourMAC, dst: vip6, noSLLA: true, ethSrc: net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}}, net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}, asker6, true},
		{"duplicate address detection: all nodes, not solicited", ns{src: netip.IPv6Unspecified(), noSLLA: true}, allNodesMAC(), netip.IPv6LinkLocalAllNodes(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, p := decide6(tc.ns.frame(t), ourMAC, vipSet{vip6})
			if v != answer {
				t.Fatalf("decide6 = %v, want answer", v)
			}
			want := &ndpPacket{ethDst: tc.ethDst, ethSrc: ourMAC, src: vip6, dst: tc.dst, hopLimit: 255,
				msg: &ndp.NeighborAdvertisement{Solicited: tc.solicited, Override: true, TargetAddress: vip6,
					Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ourMAC}}}}
			if got, want := describe(p), describe(want); got != want {
				t.Errorf("answer\n got %s\nwant %s", got, want)
			}
			// What goes on the wire reads back the same, checksum and all.
			back, err := parseNDP(mustMarshal(t, p))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := describe(back), describe(p); got != want {
				t.Errorf("read back\n got %s\nwant %s", got, want)
			}
		})
	}
}

// describe prints a packet with its message and options spelled out.
func describe(p *ndpPacket) string {
	if p == nil {
		return "<nil>"
	}
	var opts []string
	var msg string
	switch m := p.msg.(type) {
	case *ndp.NeighborAdvertisement:
		msg = fmt.Sprintf("NA R=%v S=%v O=%v target %v", m.Router, m.Solicited, m.Override, m.TargetAddress)
		for _, o := range m.Options {
			opts = append(opts, fmt.Sprintf("%+v", o))
		}
	case *ndp.NeighborSolicitation:
		msg = fmt.Sprintf("NS target %v", m.TargetAddress)
		for _, o := range m.Options {
			opts = append(opts, fmt.Sprintf("%+v", o))
		}
	default:
		msg = fmt.Sprintf("%T", m)
	}
	return fmt.Sprintf("%v > %v, %v > %v hop limit %d: %s %v", p.ethSrc, p.ethDst, p.src, p.dst, p.hopLimit, msg, opts)
}

func TestUnsolicitedAdvertisementOverridesForAllNodes(t *testing.T) {
	p := unsolicitedAdvertisement(ourMAC, vip6)
	want := fmt.Sprintf("%v > 33:33:00:00:00:01, 2001:2::10 > ff02::1 hop limit 255: NA R=false S=false O=true target 2001:2::10 [%+v]",
		ourMAC, &ndp.LinkLayerAddress{Direction: ndp.Target, Addr: ourMAC})
	if got := describe(p); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	b := mustMarshal(t, p)
	back, err := parseNDP(b)
	if err != nil {
		t.Fatal(err)
	}
	if describe(back) != want {
		t.Errorf("read back %s", describe(back))
	}
	// RFC 4861 7.1.2: a multicast advertisement must not be Solicited; and
	// our own reader must never answer it or take it for a conflict.
	if v, _ := decide6(b, ourMAC, vipSet{vip6}); v != ignoreFromSelf {
		t.Errorf("decide6(own advertisement) = %v, want %v", v, ignoreFromSelf)
	}
}

func TestICMPv6Checksum(t *testing.T) {
	// mdlayher/ndp computes the checksum through x/net/icmp: ours must
	// agree on every message length, odd ones included.
	for _, n := range []int{0, 1, 7, 8} {
		msg := &ndp.NeighborSolicitation{TargetAddress: vip6, Options: []ndp.Option{&ndp.RawOption{Type: 99, Length: 1, Value: bytes.Repeat([]byte{0xab}, 6)}}}
		b, err := ndp.MarshalMessageChecksum(msg, asker6, snm)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, bytes.Repeat([]byte{0xcd}, n)...)
		sum := binary.BigEndian.Uint16(b[2:4])
		binary.BigEndian.PutUint16(b[2:4], 0)
		if n == 0 {
			if got := icmpv6Checksum(asker6, snm, b); got != sum {
				t.Errorf("checksum %#04x, mdlayher/ndp's %#04x", got, sum)
			}
		}
		binary.BigEndian.PutUint16(b[2:4], icmpv6Checksum(asker6, snm, b))
		if got := icmpv6Checksum(asker6, snm, b); got != 0 {
			t.Errorf("%d extra bytes: checksum over a checksummed message = %#04x, want 0", n, got)
		}
		if got := icmpv6Checksum(asker6, vip6, b); got == 0 {
			t.Errorf("%d extra bytes: checksum with another destination = 0", n)
		}
	}
}

func TestNDPFilterKeepsOnlyNeighbourDiscovery(t *testing.T) {
	filter, err := ndpFilter()
	if err != nil {
		t.Fatal(err)
	}
	insns := make([]bpf.Instruction, len(filter))
	for i, r := range filter {
		insns[i] = r.Disassemble()
	}
	vm, err := bpf.NewVM(insns)
	if err != nil {
		t.Fatal(err)
	}
	valid := ns{}.frame(t)
	withType := func(typ byte) []byte { return corrupt(valid, icmpOff, func(byte) byte { return typ }) }
	for _, tc := range []struct {
		name  string
		frame []byte
		keep  bool
	}{
		{"neighbour solicitation", valid, true},
		{"neighbour advertisement", mustMarshal(t, unsolicitedAdvertisement(ourMAC, vip6)), true},
		{"hop limit 64: kept, so that the reader can log it", ns{hop: 64}.frame(t), true},
		{"echo request", withType(128), false},
		{"router advertisement", withType(134), false},
		{"MLD report", withType(143), false},
		{"TCP", corrupt(valid, ethernetHeaderLen+6, func(byte) byte { return 6 }), false},
		{"hop-by-hop header", corrupt(valid, ethernetHeaderLen+6, func(byte) byte { return 0 }), false},
		{"too short to hold the type", valid[:icmpOff], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := vm.Run(tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			if keep := n > 0; keep != tc.keep {
				t.Errorf("filter kept %d bytes, want kept=%v", n, tc.keep)
			}
			if tc.keep && n < len(tc.frame) {
				t.Errorf("filter kept %d of %d bytes", n, len(tc.frame))
			}
		})
	}
}

func TestSolicitedNodeGroupsAreSharedAndIPv6Only(t *testing.T) {
	vips := vipSet{vip, netip.MustParseAddr("2001:2::1:10"), vip6, netip.MustParseAddr("2001:2:1::10"), netip.MustParseAddr("2001:2::ab:cdef")}
	slices.SortFunc(vips, netip.Addr.Compare)
	want := []netip.Addr{snm, netip.MustParseAddr("ff02::1:ff01:10"), netip.MustParseAddr("ff02::1:ffab:cdef")}
	if got := solicitedNodeGroups(vips); !slices.Equal(got, want) {
		t.Errorf("groups = %v, want %v", got, want)
	}
	if got := solicitedNodeGroups(vipSet{vip}); len(got) != 0 {
		t.Errorf("groups of IPv4 VIPs = %v, want none", got)
	}
}

func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		addr netip.Addr
		want kind
	}{{vip, arpKind}, {vip6, ndpKind}, {netip.MustParseAddr("fe80::1"), ndpKind}} {
		if got := kindOf(tc.addr); got != tc.want {
			t.Errorf("kindOf(%v) = %v, want %v", tc.addr, got, tc.want)
		}
	}
	if s := (vipSet{vip}); !s.hasKind(arpKind) || s.hasKind(ndpKind) {
		t.Errorf("%v: hasKind wrong", s)
	}
	if arpKind.String() != "ARP" || ndpKind.String() != "NDP" || ignoreHopLimit.String() != "hop limit not 255" {
		t.Error("kind or verdict strings changed")
	}
}

// FuzzDecide6 feeds decide6 what the wire may bring: it must not panic,
// must answer only for a VIP, and what it sends must read back, never as
// a question or a conflict.
func FuzzDecide6(f *testing.F) {
	for _, p := range []*ndpPacket{
		ns{}.packet(), ns{src: netip.IPv6Unspecified(), noSLLA: true}.packet(), ns{ethDst: ourMAC, dst: vip6}.packet(),
		unsolicitedAdvertisement(askerMAC, vip6),
	} {
		b, err := p.marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	vips := vipSet{vip, vip6}
	f.Fuzz(func(t *testing.T, frame []byte) {
		v, p := decide6(frame, ourMAC, vips)
		if v != answer {
			return
		}
		na := p.msg.(*ndp.NeighborAdvertisement)
		if !vips.has(na.TargetAddress) {
			t.Fatalf("answered for %v, not a VIP", na.TargetAddress)
		}
		b, err := p.marshal()
		if err != nil {
			t.Fatalf("marshalling the answer %s: %v", describe(p), err)
		}
		if _, err := parseNDP(b); err != nil {
			t.Fatalf("our answer %s does not read back: %v", describe(p), err)
		}
		if v, _ := decide6(b, ourMAC, vips); v == answer || v == conflict {
			t.Fatalf("our answer %s reads back as %v", describe(p), v)
		}
	})
}
