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
