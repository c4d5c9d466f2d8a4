package conntrack

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestUDPFlowsMatch(t *testing.T) {
	f := udpFlows{{VIP: netip.MustParseAddrPort("192.0.2.53:53"), Real: netip.MustParseAddrPort("10.0.0.2:53")}: true}
	flow := func(proto uint8, vip string, vport uint16, replySrc string, replyPort uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("198.18.1.11"), DstIP: net.ParseIP(vip), SrcPort: 40000, DstPort: vport},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), SrcPort: replyPort, DstIP: net.ParseIP("198.18.1.11"), DstPort: 40000},
		}
	}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want bool
	}{
		{"udp flow of the virtual server scheduled to the deleted real server", flow(syscall.IPPROTO_UDP, "192.0.2.53", 53, "10.0.0.2", 53), true},
		{"same real server, other port", flow(syscall.IPPROTO_UDP, "192.0.2.53", 53, "10.0.0.2", 5353), false},
		{"another real server", flow(syscall.IPPROTO_UDP, "192.0.2.53", 53, "10.0.0.3", 53), false},
		{"same real server under another virtual server", flow(syscall.IPPROTO_UDP, "192.0.2.54", 53, "10.0.0.2", 53), false},
		{"same real server, same VIP, other port", flow(syscall.IPPROTO_UDP, "192.0.2.53", 5353, "10.0.0.2", 53), false},
		{"tcp to the same address and port", flow(syscall.IPPROTO_TCP, "192.0.2.53", 53, "10.0.0.2", 53), false},
	}
	for _, tt := range tests {
		if got := f.MatchConntrackFlow(tt.flow); got != tt.want {
			t.Errorf("%s: got %v", tt.name, got)
		}
	}
}

func TestUnNATedToMatch(t *testing.T) {
	m := unNATedTo{netip.MustParseAddr("198.18.100.1"): true, netip.MustParseAddr("2001:2::1"): true}
	client, rs := "198.18.1.11", "198.18.3.11"
	flow := func(proto uint8, src, vip, replySrc, replyDst string, replyPort uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(src), DstIP: net.ParseIP(vip), SrcPort: 52250, DstPort: 80},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), SrcPort: 80, DstIP: net.ParseIP(replyDst), DstPort: replyPort},
		}
	}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want bool
	}{
		{"IPVS NAT connection to a released VIP", flow(syscall.IPPROTO_TCP, client, "198.18.100.1", rs, client, 52250), true},
		{"UDP too", flow(syscall.IPPROTO_UDP, client, "198.18.100.1", rs, client, 52250), true},
		{"IPv6", flow(syscall.IPPROTO_TCP, "2001:2:0:1::b", "2001:2::1", "2001:2:0:3::b", "2001:2:0:1::b", 52250), true},
		{"IPv4-mapped addresses count as IPv4", flow(syscall.IPPROTO_TCP, "::ffff:"+client, "::ffff:198.18.100.1", rs, "::ffff:"+client, 52250), true},
		{"a VIP still served", flow(syscall.IPPROTO_TCP, client, "198.18.100.2", rs, client, 52250), false},
		{"masqueraded (SNAT to the box or a floating address): conntrackd's", flow(syscall.IPPROTO_TCP, client, "198.18.100.1", rs, "198.18.3.10", 52250), false},
		{"source port NATed", flow(syscall.IPPROTO_TCP, client, "198.18.100.1", rs, client, 61000), false},
	}
	for _, tt := range tests {
		if got := m.MatchConntrackFlow(tt.flow); got != tt.want {
			t.Errorf("%s: got %v", tt.name, got)
		}
	}
}
