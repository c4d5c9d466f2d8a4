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
	tests := []struct {
		name         string
		serving      Serving
		vips         string
		announceEth0 string
	}{
		{"the zero value serves all", Serving{}, "[192.0.2.10 192.0.2.11 192.0.2.53]", "[192.0.2.10 192.0.2.11]"},
		{"one VIP of a service", ServeOnly(b), "[192.0.2.11]", "[192.0.2.11]"},
		{"another service's VIP", ServeOnly(dns), "[192.0.2.53]", "[]"},
		{"standby: none", ServeOnly(), "[]", "[]"},
		{"an address no service has", ServeOnly(netip.MustParseAddr("192.0.2.99"), a), "[192.0.2.10]", "[192.0.2.10]"},
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
			if len(st.Services) != 3 {
				t.Errorf("%d virtual servers, want all 3 whatever is served", len(st.Services))
			}
		})
	}
}
