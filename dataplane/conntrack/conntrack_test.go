package conntrack

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestUDPReplyFrom(t *testing.T) {
	f := udpReplyFrom{netip.MustParseAddrPort("10.0.0.2:53"): true}
	flow := func(proto uint8, replySrc string, replyPort uint16) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{
			Forward: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP("198.18.1.11"), DstIP: net.ParseIP("192.0.2.53"), SrcPort: 40000, DstPort: 53},
			Reverse: netlink.IPTuple{Protocol: proto, SrcIP: net.ParseIP(replySrc), SrcPort: replyPort, DstIP: net.ParseIP("198.18.1.11"), DstPort: 40000},
		}
	}
	tests := []struct {
		name string
		flow *netlink.ConntrackFlow
		want bool
	}{
		{"udp flow scheduled to the deleted real server", flow(syscall.IPPROTO_UDP, "10.0.0.2", 53), true},
		{"same real server, other port", flow(syscall.IPPROTO_UDP, "10.0.0.2", 5353), false},
		{"another real server", flow(syscall.IPPROTO_UDP, "10.0.0.3", 53), false},
		{"tcp to the same address and port", flow(syscall.IPPROTO_TCP, "10.0.0.2", 53), false},
	}
	for _, tt := range tests {
		if got := f.MatchConntrackFlow(tt.flow); got != tt.want {
			t.Errorf("%s: got %v", tt.name, got)
		}
	}
}
