//go:build e2e

package e2e

import (
	_ "embed"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

//go:embed demo.toml
var demoConfig string

// TestDemo is the README's demo (scripts/demo.sh): lbd started from a TOML
// file balances real traffic, follows a weight change and drains a real
// server, all while the story is printed. It runs in every e2e run, so the
// demo stays true.
func TestDemo(t *testing.T) {
	topo.RequireIPVS(t)
	say := func(format string, args ...any) { t.Logf("\n>>> "+format, args...) }
	tp := topo.New(t, topo.Options{RealServers: 3})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	vip := netip.AddrPortFrom(netip.MustParseAddr("198.18.100.10"), 80)
	say("network: client %s -> router -> director %s (lbd) -> real servers rs1..rs3 on %s",
		client.Addr(tp.Clients), dir.Addr(tp.Frontend), topo.BackendPrefix)

	say("starting lbd with this configuration:\n%s", demoConfig)
	l := startLBD(t, dir, demoConfig)
	waitIPVS(t, dir, "lbd to program IPVS", l.plan(t))
	say("lbd programmed the kernel; ipvsadm -Ln on the director:\n%s", dir.MustExec(t, "ipvsadm", "-Ln"))

	spread := func(n int) map[string]int {
		waitServes(t, client, topo.HTTP, vip)
		per := probeOK(t, client, topo.HTTP, vip, n).ByServer()
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(per)) {
			parts = append(parts, fmt.Sprintf("%s=%d", s, per[s]))
		}
		say("%d requests from the client to http://%s/ were answered by: %s", n, vip, strings.Join(parts, " "))
		return per
	}
	if per := spread(30); per["rs1"] != 10 || per["rs2"] != 10 || per["rs3"] != 10 {
		t.Errorf("equal weights over 30 connections: %v; want 10 each", per)
	}

	say("editing lbd.toml: rs3 gets weight 4 (the daemon follows the file; no restart)")
	edited := strings.Replace(demoConfig, `address = "198.18.3.13"`, "address = \"198.18.3.13\"\nweight = 4", 1)
	l.writeConfig(t, edited)
	waitIPVS(t, dir, "the new weight in IPVS", l.plan(t))
	if per := spread(30); per["rs3"] != 20 {
		t.Errorf("weights 1:1:4 over 30 connections: %v; want rs3=20", per)
	}

	say("editing lbd.toml: rs1 removed; it is drained (weight 0) so its open connections can finish")
	l.writeConfig(t, strings.Replace(edited, "[[service.real_server]]\naddress = \"198.18.3.11\"\n\n", "", 1))
	rs1 := fmt.Sprintf("-a -t %s -r %s:80 -m -w 0", vip, tp.RealServers[0].Addr(tp.Backend))
	eventually(t, "rs1 drained", func() error {
		if !slices.Contains(ipvsadmSave(t, dir), rs1) {
			return fmt.Errorf("ipvsadm -Sn: %v", ipvsadmSave(t, dir))
		}
		return nil
	})
	say("ipvsadm -Ln now:\n%s", dir.MustExec(t, "ipvsadm", "-Ln"))
	if per := spread(25); per["rs1"] != 0 {
		t.Errorf("a drained real server got new connections: %v", per)
	}
	say("demo done: lbd's log is below when run with LBD_E2E_DEMO=1\n%s", demoLog(l))
}

// demoLog returns lbd's log for the demo, or a hint.
func demoLog(l *lbd) string {
	if !demoMode() {
		return "(set LBD_E2E_DEMO=1)"
	}
	return l.proc.Output()
}
