package announce

import (
	"bytes"
	"net"
	"net/netip"
	"slices"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// vipSet is a sorted, duplicate-free list of VIPs, IPv4 ones first; it is
// never modified once published, so readers need no lock.
type vipSet []netip.Addr

func (s vipSet) has(a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(s, a, netip.Addr.Compare)
	return ok
}

// kind is the protocol that answers for a VIP: ARP for IPv4, NDP for IPv6.
// Each has a socket of its own on an interface.
type kind int

const (
	arpKind kind = iota
	ndpKind
	numKinds
)

func kindOf(a netip.Addr) kind {
	if a.Is4() {
		return arpKind
	}
	return ndpKind
}

func (k kind) String() string {
	if k == arpKind {
		return "ARP"
	}
	return "NDP"
}

// announcement names what is sent when lbd starts answering for a VIP.
func (k kind) announcement() string {
	if k == arpKind {
		return "gratuitous ARP"
	}
	return "unsolicited neighbour advertisement"
}

// hasKind says whether s has a VIP that k answers for.
func (s vipSet) hasKind(k kind) bool {
	return slices.ContainsFunc(s, func(a netip.Addr) bool { return kindOf(a) == k })
}

// verdict is what decide makes of one received frame.
type verdict int

const (
	ignoreMalformed    verdict = iota // not a well-formed Ethernet/IPv4 ARP packet or NDP message
	ignoreNotForUs                    // Ethernet (or NDP: IPv6) destination is not ours
	ignoreFromSelf                    // sent by this interface (our own gratuitous ARP)
	ignoreNotRequest                  // a reply (advertisement), not a question
	ignoreAnnouncement                // someone's gratuitous ARP for an address not ours
	ignoreNotVIP                      // a question about an address we were not handed
	ignoreHopLimit                    // NDP with a hop limit below 255: from beyond a router
	conflict                          // another MAC uses one of our VIPs as its address
	answer                            // a who-has (solicitation) for one of our VIPs
)

func (v verdict) String() string {
	switch v {
	case ignoreMalformed:
		return "malformed"
	case ignoreNotForUs:
		return "not for us"
	case ignoreFromSelf:
		return "from self"
	case ignoreNotRequest:
		return "not a request"
	case ignoreAnnouncement:
		return "announcement"
	case ignoreNotVIP:
		return "not a VIP"
	case ignoreHopLimit:
		return "hop limit not 255"
	case conflict:
		return "conflict"
	case answer:
		return "answer"
	}
	return "unknown"
}

// decide says what to do with one received Ethernet frame on an interface
// with hardware address mac that answers for vips; for answer it also
// returns the reply, to be sent to reply.TargetHardwareAddr. For conflict
// it returns the offending packet. It is pure, so that every rule is
// table-tested without a network.
func decide(frame []byte, mac net.HardwareAddr, vips vipSet) (verdict, *arp.Packet) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP || f.VLAN != nil {
		// A tagged frame belongs to a VLAN interface, not to this one.
		return ignoreMalformed, nil
	}
	if !bytes.Equal(f.Destination, ethernet.Broadcast) && !bytes.Equal(f.Destination, mac) {
		return ignoreNotForUs, nil
	}
	if bytes.Equal(f.Source, mac) {
		return ignoreFromSelf, nil
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil ||
		p.HardwareType != 1 || p.ProtocolType != uint16(ethernet.EtherTypeIPv4) ||
		p.HardwareAddrLength != 6 || p.IPLength != 4 ||
		p.SenderHardwareAddr[0]&1 != 0 { // a group address cannot ask
		return ignoreMalformed, nil
	}
	switch {
	case bytes.Equal(p.SenderHardwareAddr, mac):
		return ignoreFromSelf, nil
	case vips.has(p.SenderIP):
		// Two boxes announcing one VIP (split brain, or a VIP configured
		// elsewhere): worth a warning, never an answer that feeds it.
		return conflict, &p
	case p.Operation != arp.OperationRequest:
		return ignoreNotRequest, nil
	case p.SenderIP == p.TargetIP:
		return ignoreAnnouncement, nil
	case !vips.has(p.TargetIP):
		return ignoreNotVIP, nil
	}
	// Like the kernel: unicast to the asker. An RFC 5227 probe (sender
	// 0.0.0.0) gets target 0.0.0.0, which tells the prober the VIP is
	// taken.
	reply, err := arp.NewPacket(arp.OperationReply, mac, p.TargetIP, p.SenderHardwareAddr, p.SenderIP)
	if err != nil {
		return ignoreMalformed, nil
	}
	return answer, reply
}

// gratuitousPackets returns the gratuitous ARP request and reply for vip:
// sender and target address are both the VIP. The request's target MAC is
// zero (RFC 5227 announcement), the reply's is our own (RFC 5944 4.6);
// both are sent to the Ethernet broadcast address.
func gratuitousPackets(mac net.HardwareAddr, vip netip.Addr) ([]*arp.Packet, error) {
	req, err := arp.NewPacket(arp.OperationRequest, mac, vip, make(net.HardwareAddr, 6), vip)
	if err != nil {
		return nil, err
	}
	rep, err := arp.NewPacket(arp.OperationReply, mac, vip, mac, vip)
	if err != nil {
		return nil, err
	}
	return []*arp.Packet{req, rep}, nil
}
