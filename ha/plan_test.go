package ha

import (
	"fmt"
	"os"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
)

// pairConfig is examples/pair/lbd-a.toml: the plan is tested on what
// admins are shown.
func pairConfig(t *testing.T) *config.Config {
	t.Helper()
	b, err := os.ReadFile("../examples/pair/lbd-a.toml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]string{"lbd-a.toml"}, [][]byte{b})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestPlan(t *testing.T) {
	cfg := pairConfig(t)
	p := newPlan(cfg)
	if len(p.groups) != 1 || p.groups[0].Name != "pair" || len(p.groups[0].Instances) != 2 {
		t.Fatalf("groups %+v, want the sync group of both instances", p.groups)
	}
	out := p.groups[0].Instances[0]
	if got := fmt.Sprintf("%s %+v v%d vrid %d prio %d %v %v", out.Name, out.Link, out.Params.Version, out.Params.VRID,
		out.Params.Priority, out.Params.Interval, out.Params.Addrs); got != "outside4 {Interface:eth0 Family:4} v3 vrid 51 prio 150 200ms [198.18.2.10 198.19.10.1]" {
		t.Errorf("outside4: %s", got)
	}
	if got := fmt.Sprint(p.track["outside4"]); got != "[eth0 eth1]" {
		t.Errorf("outside4 tracks %s, want its own interface and eth1", got)
	}
	for _, tc := range []struct {
		name     string
		master   map[string]bool
		serves   string // of the services' VIPs
		floating string
	}{
		{"backup", nil, "[]",
			"[{198.18.2.10/24 eth0 true} {198.19.10.1/24 eth1 true} {2001:2:0:2::10/64 eth0 true} {2001:2:0:10::1/64 eth1 true}]"},
		{"master of both", map[string]bool{"outside4": true, "outside6": true}, "[198.18.100.10 198.18.100.53 2001:2:0:100::10]",
			"[{198.18.2.10/24 eth0 false} {198.19.10.1/24 eth1 false} {2001:2:0:2::10/64 eth0 false} {2001:2:0:10::1/64 eth1 false}]"},
		{"master of IPv4 only", map[string]bool{"outside4": true}, "[198.18.100.10 198.18.100.53]",
			"[{198.18.2.10/24 eth0 false} {198.19.10.1/24 eth1 false} {2001:2:0:2::10/64 eth0 true} {2001:2:0:10::1/64 eth1 true}]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			serving, fl := p.failover(tc.master)
			st := desired.Compute(desired.Input{Config: cfg, Serving: serving, Floating: fl})
			if got := fmt.Sprint(st.VIPs); got != tc.serves {
				t.Errorf("VIPs bound %s, want %s", got, tc.serves)
			}
			if got := fmt.Sprint(fl); got != tc.floating {
				t.Errorf("floating %s\nwant %s", got, tc.floating)
			}
		})
	}
}

// TestPlanAdvertisedVIP: a carried service's VIP in an instance's
// addresses is in its adverts (keepalived's virtual_ipaddress lists it) but
// is no floating address: the service binds it on lbd's link.
func TestPlanAdvertisedVIP(t *testing.T) {
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(`
[[vrrp]]
name = "o"
interface = "eth0"
virtual_router_id = 51
addresses = ["198.18.2.10/24", "198.18.100.10"]
services = ["web"]
[[service]]
name = "web"
vips = ["198.18.100.10"]
port = 80
announce = "arp"
announce_interface = "eth0"
real_server = [{ address = "198.18.3.11" }]
`)})
	if err != nil {
		t.Fatal(err)
	}
	p := newPlan(cfg)
	if got := fmt.Sprint(p.groups[0].Instances[0].Params.Addrs); got != "[198.18.2.10 198.18.100.10]" {
		t.Errorf("advertised %s, want both addresses", got)
	}
	serving, fl := p.failover(map[string]bool{"o": true})
	if got := fmt.Sprint(fl); got != "[{198.18.2.10/24 eth0 false}]" {
		t.Errorf("floating %s, want only the non-VIP address", got)
	}
	st := desired.Compute(desired.Input{Config: cfg, Serving: serving, Floating: fl})
	if got := fmt.Sprint(st.VIPs, st.Announce); got != "[198.18.100.10] map[eth0:[198.18.2.10 198.18.100.10]]" {
		t.Errorf("master binds and announces %s", got)
	}
}
