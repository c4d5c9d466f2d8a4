package announce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"golang.org/x/net/bpf"
)

// IPv6 and NDP constants that decide6 and the filter need (RFC 8200,
// RFC 4861).
const (
	ipv6HeaderLen     = 40
	protoICMPv6       = 58
	ndpHopLimit       = 255 // RFC 4861: sent with 255, and anything less came through a router
	minNDPMessage     = 24  // RFC 4861 7.1: ICMP length of a solicitation or advertisement
	icmpTypeNS        = 135
	icmpTypeNA        = 136
	ipv6NextHdrOff    = ethernetHeaderLen + 6
	icmpv6TypeOff     = ethernetHeaderLen + ipv6HeaderLen
	ethernetHeaderLen = 14
)

// maxFrame is the largest frame read or kept by the filter: an Ethernet
// frame at the standard MTU. NDP frames are under 100 bytes.
const maxFrame = 1514

// allNodesMAC is ff02::1, where unsolicited advertisements and answers to
// duplicate address detection go, mapped to Ethernet (RFC 2464 7).
func allNodesMAC() net.HardwareAddr { return net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1} }

// ndpFilter is the socket filter of an NDP socket: it keeps neighbour
// solicitations and advertisements, and drops every other IPv6 frame in the
// kernel, so that a busy outside interface does not copy its traffic to
// lbd. Extension headers before ICMPv6 are dropped too; NDP never has them.
func ndpFilter() ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: ipv6NextHdrOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: protoICMPv6, SkipFalse: 4},
		bpf.LoadAbsolute{Off: icmpv6TypeOff, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpTypeNS, SkipTrue: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: icmpTypeNA, SkipFalse: 1},
		bpf.RetConstant{Val: maxFrame},
		bpf.RetConstant{Val: 0},
	})
}

// ndpPacket is one NDP message in its Ethernet frame: one read by
// parseNDP, or one to send.
type ndpPacket struct {
	ethDst, ethSrc net.HardwareAddr
	src, dst       netip.Addr
	hopLimit       uint8
	msg            ndp.Message
}

// errNotNDP says that a frame is not a well-formed NDP message.
var errNotNDP = errors.New("not a well-formed NDP message")

// parseNDP reads an untagged Ethernet frame carrying an IPv6 packet whose
// payload is an ICMPv6 NDP message with a valid checksum, code 0 and the
// minimum length of RFC 4861 7.1. It does not judge the hop limit or the
// addresses: decide6 does.
func parseNDP(frame []byte) (*ndpPacket, error) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotNDP, err)
	}
	if f.EtherType != ethernet.EtherTypeIPv6 || f.VLAN != nil {
		// A tagged frame belongs to a VLAN interface, not to this one.
		return nil, fmt.Errorf("%w: EtherType %v, VLAN %v", errNotNDP, f.EtherType, f.VLAN)
	}
	b := f.Payload
	if len(b) < ipv6HeaderLen || b[0]>>4 != 6 || b[6] != protoICMPv6 {
		return nil, fmt.Errorf("%w: not IPv6 carrying ICMPv6 directly", errNotNDP)
	}
	// The payload length, not the frame's, bounds the message: short
	// frames are padded.
	n := int(binary.BigEndian.Uint16(b[4:6]))
	if ipv6HeaderLen+n > len(b) {
		return nil, fmt.Errorf("%w: payload length %d in %d bytes", errNotNDP, n, len(b)-ipv6HeaderLen)
	}
	p := &ndpPacket{
		ethDst: f.Destination, ethSrc: f.Source,
		src:      netip.AddrFrom16([16]byte(b[8:24])),
		dst:      netip.AddrFrom16([16]byte(b[24:40])),
		hopLimit: b[7],
	}
	body := b[ipv6HeaderLen : ipv6HeaderLen+n]
	switch {
	case len(body) < minNDPMessage:
		return nil, fmt.Errorf("%w: ICMPv6 length %d", errNotNDP, len(body))
	case body[1] != 0:
		return nil, fmt.Errorf("%w: ICMPv6 code %d", errNotNDP, body[1])
	case icmpv6Checksum(p.src, p.dst, body) != 0:
		return nil, fmt.Errorf("%w: bad ICMPv6 checksum", errNotNDP)
	}
	m, err := ndp.ParseMessage(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotNDP, err)
	}
	p.msg = m
	return p, nil
}

// marshal returns p as an Ethernet frame, the ICMPv6 checksum filled in.
func (p *ndpPacket) marshal() ([]byte, error) {
	body, err := ndp.MarshalMessageChecksum(p.msg, p.src, p.dst)
	if err != nil {
		return nil, err
	}
	b := make([]byte, ipv6HeaderLen, ipv6HeaderLen+len(body))
	b[0] = 6 << 4
	binary.BigEndian.PutUint16(b[4:6], uint16(len(body)))
	b[6], b[7] = protoICMPv6, p.hopLimit
	src, dst := p.src.As16(), p.dst.As16()
	copy(b[8:24], src[:])
	copy(b[24:40], dst[:])
	f := ethernet.Frame{Destination: p.ethDst, Source: p.ethSrc, EtherType: ethernet.EtherTypeIPv6, Payload: append(b, body...)}
	return f.MarshalBinary()
}

// icmpv6Checksum is the Internet checksum of msg behind the IPv6
// pseudo-header (RFC 8200 8.1). Over a message that carries its checksum
// it is 0 when that checksum is right.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for ; len(b) >= 2; b = b[2:] {
			sum += uint32(b[0])<<8 | uint32(b[1])
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	sum += uint32(len(msg))>>16 + uint32(len(msg))&0xffff + protoICMPv6
	add(msg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

// linkLayerAddr returns the first link-layer address option of direction
// d in opts, or nil.
func linkLayerAddr(opts []ndp.Option, d ndp.Direction) net.HardwareAddr {
	for _, o := range opts {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == d {
			return lla.Addr
		}
	}
	return nil
}

// advertisement is a neighbour advertisement for vip from mac: the
// target link-layer address is always included, so that the receiver can
// create or update its entry, and Override is always set, so that it
// replaces the MAC of the box that held the VIP before (RFC 4861 7.2.4 and
// 7.2.6). The source address is the VIP itself, as the kernel does for its
// own addresses and keepalived for its unsolicited advertisements: the
// interface needs no IPv6 address, and RFC 4861 asks for a link-local
// source only in router messages.
func advertisement(mac net.HardwareAddr, vip netip.Addr, dstMAC net.HardwareAddr, dst netip.Addr, solicited bool) *ndpPacket {
	return &ndpPacket{
		ethDst: dstMAC, ethSrc: mac, src: vip, dst: dst, hopLimit: ndpHopLimit,
		msg: &ndp.NeighborAdvertisement{
			Solicited: solicited, Override: true, TargetAddress: vip,
			Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
		},
	}
}

// unsolicitedAdvertisement is what lbd sends to all nodes when it starts
// answering for vip (RFC 4861 7.2.6), the IPv6 twin of gratuitous ARP.
func unsolicitedAdvertisement(mac net.HardwareAddr, vip netip.Addr) *ndpPacket {
	return advertisement(mac, vip, allNodesMAC(), netip.IPv6LinkLocalAllNodes(), false)
}

// decide6 says what to do with one received frame on an interface with
// hardware address mac that answers for vips: like decide for ARP. For
// answer it returns the advertisement to send, for conflict and
// ignoreHopLimit the offending packet. It is pure, so that every rule is table-tested without a
// network.
func decide6(frame []byte, mac net.HardwareAddr, vips vipSet) (verdict, *ndpPacket) {
	p, err := parseNDP(frame)
	if err != nil {
		return ignoreMalformed, nil
	}
	// Our MAC or a multicast group: the socket only sees frames the
	// interface accepted.
	if !bytes.Equal(p.ethDst, mac) && p.ethDst[0]&1 == 0 {
		return ignoreNotForUs, nil
	}
	if bytes.Equal(p.ethSrc, mac) {
		return ignoreFromSelf, nil
	}
	if p.ethSrc[0]&1 != 0 { // a group address cannot ask
		return ignoreMalformed, nil
	}
	if p.hopLimit != ndpHopLimit {
		// RFC 4861 7.1: it was forwarded by a router, so it does not come
		// from this link.
		return ignoreHopLimit, p
	}
	switch m := p.msg.(type) {
	case *ndp.NeighborSolicitation:
		return decideSolicitation(p, m, mac, vips)
	case *ndp.NeighborAdvertisement:
		other := linkLayerAddr(m.Options, ndp.Target)
		if other == nil {
			other = p.ethSrc
		}
		if vips.has(m.TargetAddress) && !bytes.Equal(other, mac) {
			// Another box advertises one of our VIPs: split brain, or a
			// VIP configured elsewhere.
			return conflict, p
		}
	}
	return ignoreNotRequest, nil
}

// decideSolicitation is decide6 for a neighbour solicitation that passed
// the link-level checks.
func decideSolicitation(p *ndpPacket, m *ndp.NeighborSolicitation, mac net.HardwareAddr, vips vipSet) (verdict, *ndpPacket) {
	target := m.TargetAddress
	snm, err := ndp.SolicitedNodeMulticast(target)
	if err != nil || target.IsMulticast() {
		return ignoreMalformed, nil
	}
	asker := linkLayerAddr(m.Options, ndp.Source)
	dad := p.src.IsUnspecified()
	// RFC 4861 4.3 and 7.1.1: sent to the target's solicited-node group
	// or to the target itself; duplicate address detection only to the
	// group and without a source link-layer address.
	switch {
	case p.src.IsMulticast():
		return ignoreMalformed, nil
	case p.dst != snm && p.dst != target:
		return ignoreNotForUs, nil
	case dad && (p.dst != snm || asker != nil):
		return ignoreMalformed, nil
	case asker != nil && (len(asker) != 6 || asker[0]&1 != 0):
		return ignoreMalformed, nil
	case bytes.Equal(asker, mac):
		return ignoreFromSelf, nil
	case vips.has(p.src):
		// Someone else speaks from one of our VIPs.
		return conflict, p
	case !vips.has(target):
		return ignoreNotVIP, nil
	}
	if dad {
		// RFC 4861 7.2.4: the prober has no address to answer to; all
		// nodes hear that the VIP is taken, and Solicited is not set.
		return answer, advertisement(mac, target, allNodesMAC(), netip.IPv6LinkLocalAllNodes(), false)
	}
	if asker == nil {
		asker = p.ethSrc
	}
	// Straight to the asker's MAC, as its option says (RFC 4861 7.2.3):
	// asking the kernel to resolve the asker would cost a round trip, and
	// an address on this interface.
	return answer, advertisement(mac, target, asker, p.src, true)
}
