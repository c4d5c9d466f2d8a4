package desired

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestComputeServing checks that the VIPs this box does not serve are
// neither bound nor announced, while their virtual servers stay.
func TestComputeServing(t *testing.T) {
	cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10", "192.0.2.11"]
port = 80
announce = "arp"
announce_interface = "eth0"
real_server = [{ address = "10.0.0.1" }]
[[service]]
name = "dns"
vips = ["192.0.2.53"]
port = 53
protocol = "udp"
real_server = [{ address = "10.0.0.2" }]
`)
	a, b, dns := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.53")
	// standbyEth0: the announced kind not served, whose sockets stay ready.
	tests := []struct {
		name                      string
		serving                   Serving
		vips                      string
		announceEth0, standbyEth0 string
	}{
		{"the zero value serves all", Serving{}, "[192.0.2.10 192.0.2.11 192.0.2.53]", "[192.0.2.10 192.0.2.11]", "[]"},
		{"one VIP of a service", ServeOnly(b), "[192.0.2.11]", "[192.0.2.11]", "[192.0.2.10]"},
		{"another service's VIP", ServeOnly(dns), "[192.0.2.53]", "[]", "[192.0.2.10 192.0.2.11]"},
		{"standby: none", ServeOnly(), "[]", "[]", "[192.0.2.10 192.0.2.11]"},
		{"an address no service has", ServeOnly(netip.MustParseAddr("192.0.2.99"), a), "[192.0.2.10]", "[192.0.2.10]", "[192.0.2.11]"},
		{"VRRP backup of web", HoldServices(false, "web"), "[192.0.2.53]", "[]", "[192.0.2.10 192.0.2.11]"},
		{"VRRP backup of dns", HoldServices(false, "dns", "no-such"), "[192.0.2.10 192.0.2.11]", "[192.0.2.10 192.0.2.11]", "[]"},
		{"VRRP backup of all", HoldServices(true), "[]", "[]", "[192.0.2.10 192.0.2.11]"},
		{"VRRP master of all", HoldServices(false), "[192.0.2.10 192.0.2.11 192.0.2.53]", "[192.0.2.10 192.0.2.11]", "[]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Compute(Input{Config: cfg, Serving: tt.serving})
			if got := fmt.Sprint(st.VIPs); got != tt.vips {
				t.Errorf("VIPs %s, want %s", got, tt.vips)
			}
			if got := fmt.Sprint(st.Announce["eth0"]); got != tt.announceEth0 {
				t.Errorf("announced on eth0: %s, want %s", got, tt.announceEth0)
			}
			if got := fmt.Sprint(st.Standby["eth0"]); got != tt.standbyEth0 {
				t.Errorf("standby on eth0: %s, want %s", got, tt.standbyEth0)
			}
			if len(st.Services) != 3 {
				t.Errorf("%d virtual servers, want all 3 whatever is served", len(st.Services))
			}
		})
	}
}

// Floating addresses come through as they are; the ones not held are
// announced on their link, so that becoming master sends gratuitous ARP
// (unsolicited neighbour advertisements for IPv6).
func TestComputeFloating(t *testing.T) {
	cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1" }]
`)
	fl := []Floating{
		{Prefix: netip.MustParsePrefix("198.18.3.1/24"), Link: "eth1"},
		{Prefix: netip.MustParsePrefix("198.18.2.10/32"), Link: "eth0", Held: true},
		{Prefix: netip.MustParsePrefix("2001:2:0:3::1/64"), Link: "eth1"},
	}
	st := Compute(Input{Config: cfg, Floating: fl})
	if len(st.Floating) != 3 || st.Floating[1] != fl[1] {
		t.Errorf("Floating %v, want %v", st.Floating, fl)
	}
	if got := fmt.Sprint(st.Announce); got != "map[eth1:[198.18.3.1 2001:2:0:3::1]]" {
		t.Errorf("Announce %s, want the floating addresses not held, of both families, on their link", got)
	}
	if got := fmt.Sprint(st.Standby); got != "map[eth0:[198.18.2.10]]" {
		t.Errorf("Standby %s, want the held floating address on its link", got)
	}
}

// IPv6 VIPs with announce = "arp" are announced (NDP) like IPv4 ones, and
// only while served.
func TestComputeAnnouncesBothFamilies(t *testing.T) {
	cfg := parse(t, `
[[service]]
name = "web4"
vips = ["198.18.0.10"]
port = 80
announce = "arp"
announce_interface = "eth0"
real_server = [{ address = "10.0.0.1" }]
[[service]]
name = "web6"
vips = ["2001:2::10"]
port = 80
announce = "arp"
announce_interface = "eth0"
real_server = [{ address = "2001:2:1::1" }]
`)
	for _, tt := range []struct {
		name    string
		serving Serving
		want    string
	}{
		{"all served", Serving{}, "map[eth0:[198.18.0.10 2001:2::10]]"},
		{"the IPv6 service on standby", HoldServices(false, "web6"), "map[eth0:[198.18.0.10]]"},
		{"only the IPv6 VIP served", ServeOnly(netip.MustParseAddr("2001:2::10")), "map[eth0:[2001:2::10]]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprint(Compute(Input{Config: cfg, Serving: tt.serving}).Announce); got != tt.want {
				t.Errorf("Announce %s, want %s", got, tt.want)
			}
		})
	}
}
