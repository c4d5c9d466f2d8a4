//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestARPAnnounce proves announce = "arp": a client on the director's
// segment with an on-link route to the VIP learns the director's MAC from
// lbd's gratuitous ARP as soon as lbd starts, resolves the VIP through
// lbd's answers and reaches the service; once lbd stops, nobody answers
// ARP for the VIP (strict ARP keeps the kernel quiet) while IPVS stays.
func TestARPAnnounce(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	vip := netip.AddrPortFrom(topo.VIP(7), 80)
	// A neighbour on the frontend segment that ARPs for the VIP itself and
	// accepts gratuitous ARP (arp_accept) to show it was sent.
	nb := tp.AddHost(t, "neighbour", tp.Frontend, 60, netip.Addr{})
	nb.MustExec(t, "ip", "route", "add", vip.Addr().String(), "dev", tp.Frontend.Name)
	nb.MustExec(t, "sysctl", "-w", "net.ipv4.conf."+tp.Frontend.Name+".arp_accept=1")
	mac := strings.TrimSpace(dir.MustExec(t, "cat", "/sys/class/net/"+tp.Frontend.Name+"/address"))
	neigh := func() string {
		out, _ := nb.Exec("ip", "neigh", "show", vip.Addr().String())
		return strings.TrimSpace(out)
	}

	l := startLBD(t, dir, fmt.Sprintf(`
[sync]
min_sync_period = "200ms"
sync_period = "2s"
[[service]]
name = "arp"
vips = ["%s"]
port = 80
snat = "never"
announce = "arp"
announce_interface = %q
health_check = { type = "none" }
real_server = [{ address = "%s" }, { address = "%s" }]
`, vip.Addr(), tp.Frontend.Name, tp.RealServers[0].Addr(tp.Backend), tp.RealServers[1].Addr(tp.Backend)))

	eventually(t, "the neighbour to learn the VIP from lbd's gratuitous ARP", func() error {
		if n := neigh(); !strings.Contains(n, mac) {
			return fmt.Errorf("ip neigh: %q; want lladdr %s", n, mac)
		}
		return nil
	})
	nb.MustExec(t, "ip", "neigh", "flush", "dev", tp.Frontend.Name)
	waitServes(t, nb, topo.HTTP, vip)
	if n := neigh(); !strings.Contains(n, mac) {
		t.Errorf("the VIP resolved to %q; want the director's %s", n, mac)
	}
	if per := probeOK(t, nb, topo.HTTP, vip, 10).ByServer(); len(per) != 2 {
		t.Errorf("answers per real server: %v; want both", per)
	}
	if st := dir.MustExec(t, l.bin, "status", "--socket", l.socket()); !strings.Contains(st, "ARP/NDP on "+tp.Frontend.Name+" ("+mac+"): answering for "+vip.Addr().String()) {
		t.Errorf("lbd status does not show the ARP announcement:\n%s", st)
	}

	l.proc.Stop()
	nb.MustExec(t, "ip", "neigh", "flush", "dev", tp.Frontend.Name)
	answers, err := nb.Probe(topo.HTTP, vip, 1, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(answers.Errors()) != 1 {
		t.Errorf("with lbd stopped the VIP still answered: %+v (neigh %q)", answers, neigh())
	}
	if !strings.Contains(strings.Join(ipvsadmSave(t, dir), "\n"), vip.String()) {
		t.Errorf("stopping lbd removed the virtual server")
	}
}
