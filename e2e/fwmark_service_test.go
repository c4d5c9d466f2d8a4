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

// fwmarkConfig is TestFWMarkService's configuration: firewall-mark
// services lbd marks itself on ports 80 and 443 (one persistent NAT
// service keeping the client's address, one masqueraded, and an IPv6 one,
// persistent and masqueraded), and one whose packets the test's own
// mangle rule marks.
func fwmarkConfig(tp *topo.Topology) string {
	rs := func(i int, six bool) string {
		if six {
			return tp.RealServers[i].Addr6(tp.Backend).String()
		}
		return tp.RealServers[i].Addr(tp.Backend).String()
	}
	return fmt.Sprintf(`
[sync]
min_sync_period = "200ms"
sync_period = "2s"

[[service]]
name = "sticky"
fwmark = 7
vips = ["%[1]s"]
ports = [80, 443]
scheduler = "rr"
session_affinity = true
snat = "never"
health_check = { type = "tcp", port = 80, interval = "500ms" }
real_server = [{ address = "%[4]s" }, { address = "%[5]s" }]

[[service]]
name = "masq"
fwmark = 8
vips = ["%[2]s"]
ports = [80, 443]
scheduler = "rr"
snat = "always"
health_check = { type = "none" }
real_server = [{ address = "%[4]s" }, { address = "%[5]s" }]

[[service]]
name = "sticky6"
fwmark = 7
vips = ["%[3]s"]
ports = ["80", "443"]
scheduler = "rr"
session_affinity = true
snat = "always"
health_check = { type = "none" }
real_server = [{ address = "%[6]s" }, { address = "%[7]s" }]

[[service]]
name = "own"
fwmark = 9
scheduler = "rr"
snat = "never"
health_check = { type = "none" }
real_server = [{ address = "%[4]s" }, { address = "%[5]s" }]
`, topo.VIP(1), topo.VIP(2), topo.VIP6(1), rs(0, false), rs(1, false), rs(0, true), rs(1, true))
}

// TestFWMarkService proves firewall-mark services on the real kernel,
// with real traffic: one persistence template covers ports 80 and 443 (a
// client lands on one real server for both), NAT keeping the client's
// address and masqueraded (the real server sees the director's), IPv4
// and IPv6; the admin's own mark; `lbd plan` is what IPVS holds; lbd's
// rules are in iptables-save form; a restart writes nothing.
func TestFWMarkService(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	for _, rs := range tp.RealServers {
		rs.StartBackend(t, topo.BackendConfig{ID: rs.Host, HTTPPort: 443})
		rs.StartBackend(t, topo.BackendConfig{ID: rs.Host, HTTPPort: 8080})
	}
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	l := startLBD(t, dir, fwmarkConfig(tp))
	plan := l.plan(t)
	for _, line := range []string{"-A -f 7 -s rr -p 10800", "-A -f 7 -6 -s rr -p 10800", "-A -f 8 -s rr", "-A -f 9 -s rr",
		fmt.Sprintf("-a -f 7 -r %s:0 -m -w 1", tp.RealServers[0].Addr(tp.Backend))} {
		if !slices.Contains(plan, line) {
			t.Errorf("lbd plan lacks %q:\n%s", line, strings.Join(plan, "\n"))
		}
	}
	waitIPVS(t, dir, "IPVS to hold what lbd plan says", plan)

	sticky, sticky6 := topo.VIP(1), topo.VIP6(1)
	t.Run("one persistence template covers 80 and 443", func(t *testing.T) {
		for _, c := range []struct {
			vip, sees netip.Addr
		}{{sticky, client.Addr(tp.Clients)}, {sticky6, dir.Addr6(tp.Backend)}} {
			waitServes(t, client, topo.HTTP, netip.AddrPortFrom(c.vip, 80))
			var all topo.Answers
			for range 3 {
				for _, port := range []uint16{80, 443} {
					all = append(all, probeOK(t, client, topo.HTTP, netip.AddrPortFrom(c.vip, port), 4)...)
				}
			}
			if per := all.ByServer(); len(per) != 1 {
				t.Errorf("%s: the client's requests to 80 and 443 went to %v; want one real server (one template for the mark)", c.vip, per)
			}
			for _, a := range all {
				if a.Client != c.sees {
					t.Fatalf("%s: the real server saw %s; want %s", c.vip, a.Client, c.sees)
				}
			}
		}
	})
	t.Run("masqueraded after IPVS", func(t *testing.T) {
		masq := topo.VIP(2)
		waitServes(t, client, topo.HTTP, netip.AddrPortFrom(masq, 443))
		var all topo.Answers
		for _, port := range []uint16{80, 443} {
			all = append(all, probeOK(t, client, topo.HTTP, netip.AddrPortFrom(masq, port), 6)...)
		}
		if per := all.ByServer(); per["rs1"] == 0 || per["rs2"] == 0 {
			t.Errorf("rr through %s: %v; want both real servers", masq, per)
		}
		for _, a := range all {
			if a.Client != dir.Addr(tp.Backend) {
				t.Fatalf("the real server saw %s; want the director's %s (snat = always)", a.Client, dir.Addr(tp.Backend))
			}
		}
		// The rules that did it, as iptables-save prints them (a full
		// sync compares them so: see the restart below).
		nat := dir.MustExec(t, "iptables-save", "-t", "nat")
		for _, r := range []string{
			"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x8 -j LBD-MARK-MASQ",
			"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x7 -m set --match-set LBD-RS-NETS src -j LBD-MARK-MASQ",
		} {
			if !strings.Contains(nat, r+"\n") {
				t.Errorf("iptables-save -t nat lacks %q:\n%s", r, nat)
			}
		}
		if mangle := dir.MustExec(t, "iptables-save", "-t", "mangle"); !strings.Contains(mangle, "-A LBD-FWMARK -j SET --map-set LBD-FWMARK dst,dst --map-mark\n") {
			t.Errorf("iptables-save -t mangle:\n%s", mangle)
		}
		if set := dir.MustExec(t, "ipset", "list", "LBD-FWMARK"); !strings.Contains(set, fmt.Sprintf("%s,tcp:443 skbmark 0x8", masq)) {
			t.Errorf("ipset list LBD-FWMARK:\n%s", set)
		}
	})
	t.Run("the admin's own mark", func(t *testing.T) {
		own := netip.AddrPortFrom(topo.VIP(5), 8080)
		// An address of the admin's (not on lbd's link, which lbd owns).
		dir.MustExec(t, "ip", "addr", "add", own.Addr().String()+"/32", "dev", "lo")
		dir.MustExec(t, "iptables", "-t", "mangle", "-A", "PREROUTING", "-d", own.Addr().String(), "-p", "tcp", "--dport", "8080", "-j", "MARK", "--set-mark", "9")
		waitServes(t, client, topo.HTTP, own)
		answers := probeOK(t, client, topo.HTTP, own, 6)
		if per := answers.ByServer(); per["rs1"] != 3 || per["rs2"] != 3 {
			t.Errorf("rr through the admin's mark: %v; want 3 and 3", per)
		}
		if a := answers[0].Client; a != client.Addr(tp.Clients) {
			t.Errorf("the real server saw %s; want the client's %s (snat = never)", a, client.Addr(tp.Clients))
		}
	})
	t.Run("unserved ports of a marked VIP are still rejected", func(t *testing.T) {
		if answers, err := client.Probe(topo.HTTP, netip.AddrPortFrom(sticky, 8080), 1, requestTimeout); err != nil || len(answers.Errors()) != 1 {
			t.Errorf("a request to %s:8080 (not a marked port): %v, %v; want it refused", sticky, answers, err)
		}
	})
	t.Run("a restart writes nothing", func(t *testing.T) {
		l.kill(t)
		mark := len(l.proc.Output())
		eventually(t, "the restarted lbd's first sync", func() error {
			if !strings.Contains(sinceLog(l.proc, mark), "kernel already up to date") {
				return fmt.Errorf("no sync logged yet:\n%s", sinceLog(l.proc, mark))
			}
			return nil
		})
		if out := sinceLog(l.proc, mark); strings.Contains(out, "sync applied") {
			t.Errorf("the restarted lbd wrote to the kernel (a firewall-mark service, rule or set entry not read back as written):\n%s", out)
		}
		waitIPVS(t, dir, "the firewall-mark services kept", l.plan(t))
		probeOK(t, client, topo.HTTP, netip.AddrPortFrom(sticky, 443), 2)
	})
}
