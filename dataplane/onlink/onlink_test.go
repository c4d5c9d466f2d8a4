package onlink

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

func rs(addr string, f lvs.Forward, file string, line int) desired.Dest {
	a := netip.MustParseAddrPort(addr)
	return desired.Dest{Addr: a, Weight: 1, Real: &config.RealServer{Address: a.Addr(), Port: a.Port(), Forward: f, Weight: 1, Pos: config.Pos{File: file, Line: line}}}
}

var (
	dr   = lvs.Forward{Method: lvs.DR}
	ipip = lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.IPIP}
)

func TestDests(t *testing.T) {
	vip1, vip2, vip6 := netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("198.18.0.11"), netip.MustParseAddr("2001:2::10")
	key := func(a netip.Addr) lvs.Key { return lvs.Key{Addr: a, Port: 80, Protocol: lvs.TCP} }
	web := []desired.Dest{rs("198.18.1.1:80", dr, "web.toml", 5), rs("198.18.2.1:80", ipip, "web.toml", 8)}
	st := desired.State{Services: []desired.Service{
		{Key: key(vip1), Name: "web", Method: lvs.DR, Dests: web},
		// The same service's second VIP: its real servers are listed once.
		{Key: key(vip2), Name: "web", Method: lvs.DR, Dests: web},
		{Key: key(vip2), Name: "nat", Method: lvs.NAT, Dests: []desired.Dest{rs("198.18.1.2:80", lvs.Forward{}, "nat.toml", 3)}},
		// A tunnel service whose real servers mix in direct routing.
		{Key: key(vip6), Name: "v6", Method: lvs.Tunnel, Dests: []desired.Dest{
			rs("[2001:2:1::1]:80", ipip, "v6.toml", 4), rs("[2001:2:1::2]:80", dr, "consul node1/web-2", 0)}},
	}}
	want := []Dest{
		{Service: "web", Addr: netip.MustParseAddrPort("198.18.1.1:80"), Source: config.Pos{File: "web.toml", Line: 5}},
		{Service: "v6", Addr: netip.MustParseAddrPort("[2001:2:1::2]:80"), Source: config.Pos{File: "consul node1/web-2"}},
	}
	if got := Dests(st); !slices.Equal(got, want) {
		t.Errorf("Dests:\n got %+v\nwant %+v", got, want)
	}
	if got := Dests(desired.State{Services: st.Services[2:3]}); got != nil {
		t.Errorf("a NAT-only state has no direct-routing destinations: %+v", got)
	}
}

func TestCheck(t *testing.T) {
	d := func(addr string) Dest {
		return Dest{Service: "web", Addr: netip.MustParseAddrPort(addr), Source: config.Pos{File: "web.toml", Line: 5}}
	}
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	tests := []struct {
		name      string
		dests     []Dest
		connected []netip.Prefix
		want      []Dest // the ones reported
	}{
		{"no destinations", nil, pfx("198.18.1.0/24"), nil},
		{"on a link", []Dest{d("198.18.1.5:80")}, pfx("198.18.1.0/24"), nil},
		{"no connected route at all", []Dest{d("198.18.1.5:80")}, nil, []Dest{d("198.18.1.5:80")}},
		{"another link's network", []Dest{d("198.18.2.5:80")}, pfx("198.18.1.0/24", "2001:2::/64"), []Dest{d("198.18.2.5:80")}},
		{"an edge of the network is in it", []Dest{d("198.18.1.255:80"), d("198.18.2.0:80")}, pfx("198.18.1.0/24"), []Dest{d("198.18.2.0:80")}},
		{"IPv6 on a link, IPv6 off", []Dest{d("[2001:2::7]:80"), d("[2001:2:9::7]:80")}, pfx("198.18.1.0/24", "2001:2::/64"), []Dest{d("[2001:2:9::7]:80")}},
		{"IPv4 is not covered by an IPv6 default", []Dest{d("198.18.1.5:80")}, pfx("::/0"), []Dest{d("198.18.1.5:80")}},
		{"a link-scope default route covers everything of its family", []Dest{d("203.0.113.9:80")}, pfx("0.0.0.0/0"), nil},
		{"an IPv4-mapped address is checked as IPv4", []Dest{d("[::ffff:198.18.1.5]:80")}, pfx("198.18.1.0/24"), nil},
		{"order kept", []Dest{d("198.18.9.2:80"), d("198.18.1.1:80"), d("198.18.9.1:80")}, pfx("198.18.1.0/24"), []Dest{d("198.18.9.2:80"), d("198.18.9.1:80")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []Dest
			for _, p := range Check(tt.dests, tt.connected) {
				got = append(got, p.Dest)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// The message names the real server and its service, says why direct
// routing needs the link, and that lbd keeps it in service.
func TestProblemString(t *testing.T) {
	p := Problem{Dest{Service: "web", Addr: netip.MustParseAddrPort("198.18.2.5:80"), Source: config.Pos{File: "web.toml", Line: 5}}}
	s := p.String()
	for _, want := range []string{"real server 198.18.2.5:80 of service web", "no connected route of this director covers 198.18.2.5", "link-layer address", "neither refuses nor drains it", `forward = "tun"`} {
		if !strings.Contains(s, want) {
			t.Errorf("%q\nlacks %q", s, want)
		}
	}
}
