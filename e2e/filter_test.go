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

// TestPacketFilter proves the ipsets and iptables rules lbd writes, with
// real traffic: the SNAT modes, hairpin, NodePort-like services on node
// addresses (followed live), source ranges, rejecting unserved VIP ports,
// a default-drop host firewall, and drift repair. The subtests share one
// topology and one lbd.
func TestPacketFilter(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Clients: 2, RealServers: 2})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	c1, c2 := tp.ClientHosts[0], tp.ClientHosts[1]
	rs1, rs2 := tp.RealServers[0], tp.RealServers[1]
	vip := func(n int) netip.AddrPort { return netip.AddrPortFrom(topo.VIP(n), 80) }
	never, always, auto, fw := vip(1), vip(2), vip(3), vip(4)
	node := netip.AddrPortFrom(dir.Addr(tp.Frontend), 30080)
	reals := fmt.Sprintf(`real_server = [{ address = "%s" }, { address = "%s" }]`, rs1.Addr(tp.Backend), rs2.Addr(tp.Backend))
	service := func(name string, n int, extra string) string {
		return fmt.Sprintf("\n[[service]]\nname = %q\nvips = [%q]\nport = 80\nscheduler = \"rr\"\nhealth_check = { type = \"none\" }\n%s\n%s\n", name, topo.VIP(n), extra, reals)
	}
	l := startLBD(t, dir, fmt.Sprintf(`
[sync]
min_sync_period = "200ms"
sync_period = "2s"
[dataplane]
local_networks = ["%s/32"]
node_cidrs = ["%s"]
`, c1.Addr(tp.Clients), tp.Frontend.Prefix)+
		service("never", 1, `snat = "never"`)+
		service("always", 2, `snat = "always"`)+
		service("auto", 3, `snat = "auto"`)+
		service("fw", 4, fmt.Sprintf("snat = \"never\"\nsource_ranges = [\"%s/32\"]", c1.Addr(tp.Clients)))+
		service("np", 5, "snat = \"never\"\nnode_port = 30080"))
	waitIPVS(t, dir, "IPVS to hold what lbd plan says", l.plan(t))
	waitServes(t, c1, topo.HTTP, never)
	director := dir.Addr(tp.Backend) // MASQUERADE uses the outgoing address

	sawClient := func(t *testing.T, from *topo.Node, target netip.AddrPort) netip.Addr {
		t.Helper()
		return probeOK(t, from, topo.HTTP, target, 1)[0].Client
	}

	t.Run("ipsets and rules are in the kernel", func(t *testing.T) {
		sets := dir.MustExec(t, "ipset", "list")
		for _, want := range []string{
			fmt.Sprintf("%s,tcp:80", topo.VIP(1)),
			fmt.Sprintf("%s,tcp:30080", node.Addr()),
			fmt.Sprintf("%s,tcp:80,%s\n", topo.VIP(4), c1.Addr(tp.Clients)), // ipset prints a /32 net bare
			fmt.Sprintf("%s,tcp:80,%s", rs1.Addr(tp.Backend), rs1.Addr(tp.Backend)),
		} {
			if !strings.Contains(sets, want) {
				t.Errorf("ipset list lacks %q:\n%s", want, sets)
			}
		}
		// The director may reach a firewalled service from the VIP itself;
		// the other VIPs on lbd0 are not "the box's addresses" (one entry
		// each per firewalled service would not scale).
		srcIPs := dir.MustExec(t, "ipset", "list", "LBD-SRC-IPS")
		if own := fmt.Sprintf("%s,tcp:80,%s\n", topo.VIP(4), topo.VIP(4)); !strings.Contains(srcIPs, own) {
			t.Errorf("LBD-SRC-IPS lacks %q:\n%s", own, srcIPs)
		}
		if other := fmt.Sprintf("%s,tcp:80,%s\n", topo.VIP(4), topo.VIP(1)); strings.Contains(srcIPs, other) {
			t.Errorf("LBD-SRC-IPS has another VIP as a director address, %q:\n%s", other, srcIPs)
		}
		nat := dir.MustExec(t, "iptables-save", "-t", "nat")
		for _, want := range []string{"-A PREROUTING -m comment --comment lbd -j LBD-SERVICES", "-A LBD-POSTROUTING -j MASQUERADE --random-fully"} {
			if !strings.Contains(nat, want) {
				t.Errorf("iptables-save -t nat lacks %q:\n%s", want, nat)
			}
		}
	})

	t.Run("snat never keeps the client address, always hides it", func(t *testing.T) {
		if got := sawClient(t, c1, never); got != c1.Addr(tp.Clients) {
			t.Errorf("snat never: real server saw %s; want the client %s", got, c1.Addr(tp.Clients))
		}
		if got := sawClient(t, c1, always); got != director {
			t.Errorf("snat always: real server saw %s; want the director %s", got, director)
		}
	})

	t.Run("snat auto hides only clients outside local_networks", func(t *testing.T) {
		if got := sawClient(t, c1, auto); got != c1.Addr(tp.Clients) {
			t.Errorf("client in local_networks: real server saw %s; want %s", got, c1.Addr(tp.Clients))
		}
		if got := sawClient(t, c2, auto); got != director {
			t.Errorf("client outside local_networks: real server saw %s; want the director %s", got, director)
		}
	})

	t.Run("hairpin: a real server reaches its own service, itself and the other one", func(t *testing.T) {
		per := probeOK(t, rs1, topo.HTTP, never, 10).ByServer()
		if per["rs1"] != 5 || per["rs2"] != 5 {
			t.Errorf("rs1 -> VIP answered by %v; want rs1 and rs2 five times each", per)
		}
	})

	t.Run("NodePort-like on a node address, refused on loopback, follows new addresses", func(t *testing.T) {
		waitServes(t, c1, topo.HTTP, node)
		if got := sawClient(t, c1, node); got != c1.Addr(tp.Clients) {
			t.Errorf("node port with snat never: real server saw %s", got)
		}
		answers, err := dir.Probe(topo.HTTP, netip.MustParseAddrPort("127.0.0.1:30080"), 1, requestTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if errs := answers.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "refused") {
			t.Errorf("127.0.0.1:30080 answered %+v; loopback is never a node address", answers)
		}
		added := netip.AddrPortFrom(netip.MustParseAddr("198.18.2.50"), 30080)
		dir.MustExec(t, "ip", "addr", "add", "198.18.2.50/24", "dev", tp.Frontend.Name)
		waitServes(t, c1, topo.HTTP, added)
		if !strings.Contains(dir.MustExec(t, "ipset", "list", "LBD-NODE-PORTS"), "198.18.2.50,tcp:30080") {
			t.Errorf("the new node address is not in LBD-NODE-PORTS")
		}
		dir.MustExec(t, "ip", "addr", "del", "198.18.2.50/24", "dev", tp.Frontend.Name)
		eventually(t, "the removed node address to leave IPVS", func() error {
			if s := strings.Join(ipvsadmSave(t, dir), "\n"); strings.Contains(s, "198.18.2.50:30080") {
				return fmt.Errorf("still served:\n%s", s)
			}
			return nil
		})
	})

	t.Run("source ranges admit one client, drop another, and admit the director", func(t *testing.T) {
		probeOK(t, c1, topo.HTTP, fw, 2)
		answers, err := c2.Probe(topo.HTTP, fw, 1, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if errs := answers.Errors(); len(errs) != 1 || strings.Contains(errs[0], "refused") {
			t.Errorf("a client outside source_ranges got %+v; want a dropped (timed out) request, not refused", answers)
		}
		probeOK(t, dir.Node, topo.HTTP, fw, 2)
	})

	t.Run("a VIP port lbd does not serve is rejected at once", func(t *testing.T) {
		answers, err := c1.Probe(topo.HTTP, netip.AddrPortFrom(topo.VIP(1), 81), 1, requestTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if errs := answers.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "refused") {
			t.Errorf("VIP:81 gave %+v; want connection refused", answers)
		}
	})

	t.Run("a default-drop host firewall does not stop the services", func(t *testing.T) {
		dir.MustExec(t, "iptables", "-P", "INPUT", "DROP")
		dir.MustExec(t, "iptables", "-P", "FORWARD", "DROP")
		dir.MustExec(t, "iptables", "-A", "INPUT", "-j", "DROP")
		defer dir.MustExec(t, "iptables", "-P", "INPUT", "ACCEPT")
		defer dir.MustExec(t, "iptables", "-P", "FORWARD", "ACCEPT")
		defer dir.MustExec(t, "iptables", "-D", "INPUT", "-j", "DROP")
		probeOK(t, c1, topo.HTTP, never, 4)
		probeOK(t, c2, topo.HTTP, always, 4)
	})

	t.Run("a flushed set, a flushed chain and a removed jump are repaired", func(t *testing.T) {
		saveNat, saveFilter := dir.MustExec(t, "iptables-save", "-t", "nat"), dir.MustExec(t, "iptables-save", "-t", "filter")
		services := dir.MustExec(t, "ipset", "list", "LBD-SERVICES")
		dir.MustExec(t, "ipset", "flush", "LBD-SERVICES")
		dir.MustExec(t, "iptables", "-F", "LBD-INPUT")
		dir.MustExec(t, "iptables", "-t", "nat", "-D", "POSTROUTING", "-m", "comment", "--comment", "lbd", "-j", "LBD-POSTROUTING")
		eventually(t, "lbd to repair its set, chain and jump", func() error {
			if got := dir.MustExec(t, "ipset", "list", "LBD-SERVICES"); lbdLines(got, ",tcp:") != lbdLines(services, ",tcp:") {
				return fmt.Errorf("LBD-SERVICES:\n%s", got)
			}
			if got := dir.MustExec(t, "iptables-save", "-t", "nat"); lbdLines(got, "LBD") != lbdLines(saveNat, "LBD") {
				return fmt.Errorf("nat:\n%s", got)
			}
			if got := dir.MustExec(t, "iptables-save", "-t", "filter"); lbdLines(got, "LBD") != lbdLines(saveFilter, "LBD") {
				return fmt.Errorf("filter:\n%s", got)
			}
			return nil
		})
		if got := sawClient(t, c1, always); got != director {
			t.Errorf("after repair, snat always: real server saw %s", got)
		}
	})
}

// lbdLines returns the lines of s containing marker, sorted, as one string.
func lbdLines(s, marker string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, marker) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(sortedLines(strings.Join(out, "\n")), "\n")
}
