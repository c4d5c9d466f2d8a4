package metrics

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

func TestForwardingMetrics(t *testing.T) {
	dest := func(f lvs.Forward) desired.Dest {
		return desired.Dest{Addr: netip.MustParseAddrPort("198.18.1.5:80"), Weight: 1, Real: &config.RealServer{Forward: f, Weight: 1}}
	}
	dr, ipip, gue := lvs.Forward{Method: lvs.DR}, lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.IPIP}, lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080}
	tests := []struct {
		name         string
		services     []desired.Service
		nat, dr, tun int
	}{
		{"no services: every method's series, at 0", nil, 0, 0, 0},
		{"NAT only", []desired.Service{{Dests: []desired.Dest{dest(lvs.Forward{}), dest(lvs.Forward{})}}}, 2, 0, 0},
		{"a DR service mixing tunnels, and a NAT one", []desired.Service{
			{Method: lvs.DR, Dests: []desired.Dest{dest(dr), dest(dr), dest(ipip)}},
			{Method: lvs.Tunnel, Dests: []desired.Dest{dest(gue)}},
			{Dests: []desired.Dest{dest(lvs.Forward{})}},
		}, 1, 2, 2},
	}
	m := New()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m.ObserveForwarding(tt.services)
			err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(fmt.Sprintf(`
# HELP lbd_real_servers IPVS destinations in the applied state (one per real server and virtual server), by forwarding method: nat, dr, tun.
# TYPE lbd_real_servers gauge
lbd_real_servers{forward="dr"} %d
lbd_real_servers{forward="nat"} %d
lbd_real_servers{forward="tun"} %d
`, tt.dr, tt.nat, tt.tun)), "lbd_real_servers")
			if err != nil {
				t.Error(err)
			}
		})
	}
	for _, n := range []int{2, 0} {
		m.SetRealServersOffLink(n)
		if got := testutil.ToFloat64(m.offLink); got != float64(n) {
			t.Errorf("lbd_real_servers_off_link = %v, want %d", got, n)
		}
	}
}
