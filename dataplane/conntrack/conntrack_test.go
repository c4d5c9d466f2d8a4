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
