package onlink

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestConnected(t *testing.T) {
	ipnet := func(s string) *net.IPNet {
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	v4 := func(dst string, mod func(*netlink.Route)) netlink.Route {
		r := netlink.Route{Family: netlink.FAMILY_V4, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, Scope: netlink.SCOPE_LINK, LinkIndex: 2, Dst: ipnet(dst)}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	v6 := func(dst string, mod func(*netlink.Route)) netlink.Route {
		r := netlink.Route{Family: netlink.FAMILY_V6, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST, Scope: netlink.SCOPE_UNIVERSE, LinkIndex: 2, Dst: ipnet(dst)}
		if mod != nil {
			mod(&r)
		}
		return r
	}
	gw := net.ParseIP("198.18.1.1")
	tests := []struct {
		name  string
		route netlink.Route
		want  string // "" when not connected
	}{
		{"IPv4 link route", v4("198.18.1.0/24", nil), "198.18.1.0/24"},
		{"IPv6 link route (scope universe, as every IPv6 route)", v6("2001:2::/64", nil), "2001:2::/64"},
		{"IPv4 through a gateway", v4("198.18.9.0/24", func(r *netlink.Route) { r.Gw, r.Scope = gw, netlink.SCOPE_UNIVERSE }), ""},
		{"IPv4 scope universe without a gateway (a nexthop object's route)", v4("198.18.9.0/24", func(r *netlink.Route) { r.Scope = netlink.SCOPE_UNIVERSE }), ""},
		{"IPv6 through a gateway", v6("2001:2:9::/48", func(r *netlink.Route) { r.Gw = net.ParseIP("2001:2::1") }), ""},
		{"IPv4 through an IPv6 gateway (RTA_VIA)", v4("198.18.9.0/24", func(r *netlink.Route) {
			r.Via = &netlink.Via{AddrFamily: netlink.FAMILY_V6, Addr: net.ParseIP("fe80::1")}
		}), ""},
		{"another table", v4("198.18.1.0/24", func(r *netlink.Route) { r.Table = 100 }), ""},
		{"a blackhole", v4("198.18.1.0/24", func(r *netlink.Route) { r.Type = unix.RTN_BLACKHOLE }), ""},
		{"no output link", v4("198.18.1.0/24", func(r *netlink.Route) { r.LinkIndex = 0 }), ""},
		{"a default route out of a link", v4("0.0.0.0/0", func(r *netlink.Route) { r.Dst = nil }), "0.0.0.0/0"},
		{"an IPv6 default route out of a link", v6("::/0", func(r *netlink.Route) { r.Dst = nil }), "::/0"},
		{"multipath over links", v4("198.18.1.0/24", func(r *netlink.Route) {
			r.LinkIndex, r.MultiPath = 0, []*netlink.NexthopInfo{{LinkIndex: 2}, {LinkIndex: 3}}
		}), "198.18.1.0/24"},
		{"multipath with a gateway", v4("198.18.1.0/24", func(r *netlink.Route) {
			r.LinkIndex, r.MultiPath = 0, []*netlink.NexthopInfo{{LinkIndex: 2}, {LinkIndex: 3, Gw: gw}}
		}), ""},
		{"an IPv4 destination in 16 bytes", v4("198.18.1.0/24", func(r *netlink.Route) {
			r.Dst = &net.IPNet{IP: net.ParseIP("198.18.1.0"), Mask: net.CIDRMask(120, 128)}
		}), "198.18.1.0/24"},
		{"a mask of the wrong family", v6("2001:2::/64", func(r *netlink.Route) { r.Dst.Mask = net.CIDRMask(24, 32) }), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ok := connected(tt.route)
			got := ""
			if ok {
				got = p.String()
			}
			if got != tt.want {
				t.Errorf("connected = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestComparePrefix(t *testing.T) {
	a, b := netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("198.18.0.0/24")
	if comparePrefix(a, b) >= 0 || comparePrefix(b, a) <= 0 || comparePrefix(a, a) != 0 {
		t.Errorf("prefixes of one address are ordered by length")
	}
}
