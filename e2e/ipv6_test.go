//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestDataplaneIPv6 proves IPv6 virtual services: /128 VIPs on lbd0, IPv6
// real servers, client-IP persistence per /128, TCP and UDP through the
// VIP, with IPv6 forwarding turned on by lbd. The same lbd also carries
// one IPv4 virtual server per scheduler (with their flags) and the global
// IPVS timeouts, to prove the kernel takes everything the configuration
// accepts.
func TestDataplaneIPv6(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Clients: 2, RealServers: 2})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	// lbd must turn IPv6 forwarding on itself.
	dir.MustExec(t, "sysctl", "-w", "net.ipv6.conf.all.forwarding=0")
	rs := func(i int) string { return tp.RealServers[i].Addr6(tp.Backend).String() }
	l := startLBD(t, dir, fmt.Sprintf(`
[[service]]
name = "web6"
vips = ["%[1]s"]
port = 80
scheduler = "rr"
snat = "never"
health_check = { type = "none" }
real_server = [{ address = "%[3]s" }, { address = "%[4]s" }]

[[service]]
name = "sticky6"
vips = ["%[2]s"]
port = 80
scheduler = "rr"
session_affinity = true
health_check = { type = "none" }
real_server = [{ address = "%[3]s" }, { address = "%[4]s" }]

[[service]]
name = "dns6"
vips = ["%[1]s"]
port = 53
protocol = "udp"
real_server = [{ address = "%[3]s" }, { address = "%[4]s" }]

[ipvs]
tcp_timeout = "901s"
tcp_fin_timeout = "61s"
udp_timeout = "299s"
`, topo.VIP6(1), topo.VIP6(2), rs(0), rs(1))+schedulerServices(tp))
	waitIPVS(t, dir, "IPVS to hold the IPv6 services", l.plan(t))
	if got := vipsOn(t, dir); !slices.Contains(got, topo.VIP6(1).String()+"/128") || !slices.Contains(got, topo.VIP6(2).String()+"/128") || len(got) != 11 {
		t.Errorf("lbd0 holds %v; want the 2 IPv6 and 9 IPv4 VIPs", got)
	}
	if out := dir.MustExec(t, "ipvsadm", "-Sn"); !strings.Contains(out, "-p 10800") {
		t.Errorf("persistence missing:\n%s", out)
	}
	if out := dir.MustExec(t, "ipvsadm", "-L", "--timeout"); !strings.Contains(out, "901 61 299") {
		t.Errorf("global IPVS timeouts not applied: %s", out)
	}
	web, sticky, dns := netip.AddrPortFrom(topo.VIP6(1), 80), netip.AddrPortFrom(topo.VIP6(2), 80), netip.AddrPortFrom(topo.VIP6(1), 53)
	client, client2 := tp.ClientHosts[0], tp.ClientHosts[1]
	waitServes(t, client, topo.HTTP, web)
	if per := probeOK(t, client, topo.HTTP, web, 10).ByServer(); per["rs1"] != 5 || per["rs2"] != 5 {
		t.Errorf("rr over IPv6: %v; want 5 and 5", per)
	}
	answers := probeOK(t, client, topo.HTTP, web, 2)
	if a := answers[0].Client; a != client.Addr6(tp.Clients) {
		t.Errorf("the real server saw client %s; want %s (snat = never keeps the client address)", a, client.Addr6(tp.Clients))
	}
	if a := probeOK(t, client, topo.HTTP, sticky, 1)[0].Client; a != dir.Addr6(tp.Backend) {
		t.Errorf("with snat = auto and no local_networks the real server saw %s; want the director's %s", a, dir.Addr6(tp.Backend))
	}
	one := probeOK(t, client, topo.HTTP, sticky, 6).ByServer()
	two := probeOK(t, client2, topo.HTTP, sticky, 6).ByServer()
	if len(one) != 1 || len(two) != 1 {
		t.Errorf("IPv6 persistence spread a client: %v, %v", one, two)
	}
	waitServes(t, client, topo.UDP, dns)
	if per := probeOK(t, client, topo.UDP, dns, 6).ByServer(); len(per) != 2 {
		t.Errorf("UDP over IPv6: %v; want both real servers", per)
	}
}

// schedulerServices returns one IPv4 service per scheduler lbd accepts,
// with scheduler flags where the scheduler has them.
func schedulerServices(tp *topo.Topology) string {
	var b strings.Builder
	rs := tp.RealServers[0].Addr(tp.Backend)
	for i, sched := range []string{"rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq", "mh"} {
		flags := ""
		switch sched {
		case "sh":
			flags = `scheduler_flags = ["sh-fallback", "sh-port"]`
		case "mh":
			flags = `scheduler_flags = ["mh-port"]`
		}
		fmt.Fprintf(&b, "\n[[service]]\nname = \"sched-%s\"\nvips = [\"%s\"]\nport = 80\nscheduler = %q\n%s\nhealth_check = { type = \"none\" }\nreal_server = [{ address = \"%s\" }]\n",
			sched, topo.VIP(20+i), sched, flags, rs)
	}
	return b.String()
}
