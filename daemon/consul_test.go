package daemon

import (
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

func TestRegistrations(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	node := netip.MustParseAddr("10.1.0.5")
	vs := func(name string, addr netip.Addr, healthy, quorum int) desired.Service {
		return desired.Service{Key: lvs.Key{Addr: addr, Port: 80, Protocol: lvs.TCP}, Name: name, Healthy: healthy, Quorum: quorum}
	}
	st := desired.State{VIPs: []netip.Addr{vip}, Services: []desired.Service{
		vs("web", vip, 2, 1),
		vs("web", node, 2, 1), // its NodePort-like virtual server: not registered
		vs("api", vip, 1, 2),  // below quorum
		vs("other", vip, 3, 1),
	}}
	regs := map[string]config.ConsulRegister{"web": {Name: "web-vip", Tags: []string{"edge"}}, "api": {Name: "api"}}
	got := registrations(regs, st, nil)
	if len(got) != 2 {
		t.Fatalf("%d registrations, want web and api: %+v", len(got), got)
	}
	web, api := got[0], got[1]
	if web.ID != "lbd-web-192.0.2.10-80-tcp" || web.Name != "web-vip" || web.Address != vip || web.Port != 80 || web.Tags[0] != "edge" || !web.Healthy {
		t.Errorf("web: %+v", web)
	}
	if api.Healthy || api.Notes != "1 healthy real servers, quorum 2" {
		t.Errorf("api below its quorum must be critical: %+v", api)
	}

	// The kernel refused web's virtual server: critical, whatever its health.
	st.Services = st.Services[:1]
	got = registrations(regs, st, []lvs.Key{st.Services[0].Key})
	if len(got) != 1 || got[0].Healthy || got[0].Notes == "" {
		t.Errorf("a refused virtual server must be registered critical: %+v", got)
	}
}

// A failover backup does not serve the VIPs its VRRP instance carries:
// it registers none of them, and the master does (registrations follow
// the role, through the VIPs the sync bound).
func TestRegistrationsFollowTheRole(t *testing.T) {
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(`
[[service]]
name = "web"
vips = ["198.18.100.1"]
port = 80
real_server = [{ address = "198.18.3.11" }]
[service.consul_register]
name = "web"
[[vrrp]]
name = "outside"
interface = "eth0"
virtual_router_id = 51
addresses = ["198.18.2.10/24"]
services = ["web"]
`)})
	if err != nil {
		t.Fatal(err)
	}
	regs := map[string]config.ConsulRegister{"web": {Name: "web"}}
	for _, tc := range []struct {
		role    string
		serving desired.Serving
		want    int
	}{{"backup", desired.HoldServices(false, "web"), 0}, {"master", desired.HoldServices(false), 1}} {
		st := desired.Compute(desired.Input{Config: cfg, Serving: tc.serving})
		if got := registrations(regs, st, nil); len(got) != tc.want {
			t.Errorf("%s: %d registrations, want %d", tc.role, len(got), tc.want)
		}
	}
}
