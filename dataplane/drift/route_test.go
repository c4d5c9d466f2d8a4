package drift

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lbdproject/lbd/dataplane/genl"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestRouteEventsVerdict(t *testing.T) {
	const lbd0, eth0 = 7, 2
	wanted := []string{"198.18.100.1", "198.18.100.2", "198.18.100.3", "2001:db8::1"}
	expect := func(a netip.Addr, bound bool) bool {
		return slices.Contains(wanted, a.String()) == bound
	}
	tests := []struct {
		name    string
		index   int32 // lbd0's index when the watch starts
		noAddrs bool  // no expect: addresses are not judged
		msgs    []genl.Message
		want    []finding
	}{
		{"lbd binding and unbinding VIPs as it wants", lbd0, false,
			[]genl.Message{addrMsg(rtmNewAddr, lbd0, "198.18.100.1"), addrMsg(rtmNewAddr, lbd0, "2001:db8::1"), addrMsg(rtmDelAddr, lbd0, "198.18.100.9")},
			nil},
		{"ip addr del of VIPs lbd binds", lbd0, false,
			[]genl.Message{addrMsg(rtmDelAddr, lbd0, "198.18.100.3"), addrMsg(rtmDelAddr, lbd0, "198.18.100.2"), addrMsg(rtmDelAddr, lbd0, "2001:db8::1")},
			[]finding{{kind: addrRemoved, link: "lbd0", addr: mustAddr("198.18.100.2"), more: 2}}},
		{"ip addr add of an address lbd does not bind", lbd0, false,
			[]genl.Message{addrMsg(rtmNewAddr, lbd0, "192.0.2.7"), addrMsg(rtmDelAddr, lbd0, "198.18.100.1")},
			[]finding{{kind: addrRemoved, link: "lbd0", addr: mustAddr("198.18.100.1")}, {kind: addrAdded, link: "lbd0", addr: mustAddr("192.0.2.7")}}},
		{"the latest event of an address decides (a VIP added, then removed by the next sync)", lbd0, false,
			[]genl.Message{addrMsg(rtmNewAddr, lbd0, "198.18.100.9"), addrMsg(rtmDelAddr, lbd0, "198.18.100.9"),
				addrMsg(rtmDelAddr, lbd0, "198.18.100.1"), addrMsg(rtmNewAddr, lbd0, "198.18.100.1")},
			nil},
		{"other links and the kernel's link-local address are not lbd's", lbd0, false,
			[]genl.Message{addrMsg(rtmDelAddr, eth0, "198.18.100.1"), addrMsg(rtmNewAddr, eth0, "192.0.2.1"), addrMsg(rtmNewAddr, lbd0, "fe80::1"),
				linkMsg(rtmNewLink, eth0, "eth0", false), linkMsg(rtmDelLink, 9, "veth9", false)},
			nil},
		{"ip link del lbd0 with its VIPs", lbd0, false,
			[]genl.Message{addrMsg(rtmDelAddr, lbd0, "198.18.100.1"), addrMsg(rtmDelAddr, lbd0, "198.18.100.2"), linkMsg(rtmDelLink, lbd0, "lbd0", false)},
			[]finding{{kind: linkGone, link: "lbd0"}}},
		{"ip link set lbd0 down", lbd0, false,
			[]genl.Message{linkMsg(rtmNewLink, lbd0, "lbd0", false), addrMsg(rtmDelAddr, lbd0, "2001:db8::1")},
			[]finding{{kind: linkDown, link: "lbd0"}, {kind: addrRemoved, link: "lbd0", addr: mustAddr("2001:db8::1")}}},
		{"ip link set lbd0 name other", lbd0, false,
			[]genl.Message{linkMsg(rtmNewLink, lbd0, "other", true)},
			[]finding{{kind: linkGone, link: "lbd0"}}},
		{"lbd creating its link, setting it up and binding its VIPs", 0, false,
			[]genl.Message{addrMsg(rtmNewAddr, 12, "192.0.2.9"), linkMsg(rtmNewLink, 12, "lbd0", false), linkMsg(rtmNewLink, 12, "lbd0", true),
				addrMsg(rtmNewAddr, 12, "198.18.100.1"), addrMsg(rtmNewAddr, 12, "fe80::2")},
			nil},
		{"an address removed from the link recreated under a new index", 0, false,
			[]genl.Message{linkMsg(rtmNewLink, 12, "lbd0", true), addrMsg(rtmDelAddr, 12, "198.18.100.1"), addrMsg(rtmDelAddr, lbd0, "198.18.100.2")},
			[]finding{{kind: addrRemoved, link: "lbd0", addr: mustAddr("198.18.100.1")}}},
		{"without expect only the link is judged", lbd0, true,
			[]genl.Message{addrMsg(rtmDelAddr, lbd0, "198.18.100.1"), linkMsg(rtmNewLink, lbd0, "lbd0", false)},
			[]finding{{kind: linkDown, link: "lbd0"}}},
		{"truncated and unknown messages are ignored", lbd0, false,
			[]genl.Message{{Type: rtmDelAddr, Payload: addrMsg(rtmDelAddr, lbd0, "198.18.100.1").Payload[:6]},
				{Type: rtmDelLink, Payload: linkMsg(rtmDelLink, lbd0, "lbd0", false).Payload[:10]},
				{Type: rtmDelAddr, Payload: addrMsg(rtmDelAddr, lbd0, "198.18.100.1").Payload[:ifaddrmsgLen+3]},
				{Type: 24 /* RTM_NEWROUTE */, Payload: make([]byte, 40)}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRouteEvents("lbd0", tt.index)
			for _, m := range tt.msgs {
				r.message(m)
			}
			e := expect
			if tt.noAddrs {
				e = nil
			}
			if got := r.verdict(e); !slices.Equal(got, tt.want) {
				t.Errorf("verdict\n  %v\nwant\n  %v", got, tt.want)
			}
			if got := r.verdict(e); got != nil {
				t.Errorf("the next window without events: %v", got)
			}
		})
	}
}

func TestRouteEventsIPv4UsesTheLocalAddress(t *testing.T) {
	// On a point-to-point link IFA_ADDRESS is the peer: the address on
	// the link is IFA_LOCAL.
	m := addrMsg(rtmNewAddr, 3, "192.0.2.1")
	m.Payload = append(m.Payload[:ifaddrmsgLen], append(attr(ifaAddress, mustAddr("192.0.2.200").AsSlice()), attr(ifaLocal, mustAddr("192.0.2.1").AsSlice())...)...)
	r := newRouteEvents("lbd0", 3)
	r.message(m)
	got := r.verdict(func(netip.Addr, bool) bool { return false })
	if len(got) != 1 || got[0].addr != mustAddr("192.0.2.1") {
		t.Errorf("verdict %v; want 192.0.2.1 added", got)
	}
}

// The kernel creates a link down and lbd sets it up: when the two events
// fall into different windows (a loaded box), that is no drift; an up
// link going down is.
func TestLinkDownIsDriftOnlyAfterUp(t *testing.T) {
	r := newRouteEvents("lbd0", 0)
	windows := []struct {
		msg  genl.Message
		want []finding
	}{
		{linkMsg(rtmNewLink, 12, "lbd0", false), nil},
		{linkMsg(rtmNewLink, 12, "lbd0", true), nil},
		{linkMsg(rtmNewLink, 12, "lbd0", false), []finding{{kind: linkDown, link: "lbd0"}}},
		{linkMsg(rtmNewLink, 12, "lbd0", false), nil}, // still down: said once
	}
	for i, w := range windows {
		r.message(w.msg)
		if got := r.verdict(nil); !slices.Equal(got, w.want) {
			t.Errorf("window %d: %v; want %v", i, got, w.want)
		}
	}
}
