//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestSYNFlood: a SYN flood at a VIP (hping3, random sources) while
// established connections carry traffic. The established flows survive,
// syncs keep running and lbd's memory stays bounded; the figures (flood
// rate, conntrack and IPVS entries, lbd's RSS) are logged for the notes.
// What protects the box is the kernel's: the conntrack table's size and
// IPVS's defences (drop_entry, drop_packet, secure_tcp), which the
// package's sysctl file turns on in their automatic mode.
func TestSYNFlood(t *testing.T) {
	topo.RequireIPVS(t)
	hping, err := exec.LookPath("hping3")
	if err != nil {
		t.Fatalf("hping3 (Debian's hping3) is needed in the guest: %v", err)
	}
	tp := topo.New(t, topo.Options{Clients: 2, RealServers: 2})
	tp.StartBackends(t)
	dir, client, attacker := tp.Directors[0], tp.ClientHosts[0], tp.ClientHosts[1]
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	config := func(weight int) string {
		return fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "2s"

[[service]]
name = "web"
vips = ["%s"]
port = 80
snat = "never"
real_server = [{ address = "%s", weight = %d }, { address = "%s" }]
`, web.Addr(), tp.RealServers[0].Addr(tp.Backend), weight, tp.RealServers[1].Addr(tp.Backend))
	}
	// As the package's 60-lbd.conf sets them (IPVS sysctls are per
	// network namespace).
	for _, k := range []string{"drop_entry", "drop_packet", "secure_tcp"} {
		if err := dir.Sysctl("net.ipv4.vs."+k, "1"); err != nil {
			t.Fatal(err)
		}
	}
	l := startLBD(t, dir, config(1))
	waitServes(t, client, topo.HTTP, web)
	held := []*topo.Held{client.Hold(t, web), client.Hold(t, web), client.Hold(t, web)}
	pid := lbdPID(t, l)
	rssBefore, _ := procStatusKiB(pid, "VmRSS")

	sentBefore, floodStart := txPackets(t, attacker), time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	flood := attacker.Command(ctx, hping, "-S", "-p", "80", "--flood", "--rand-source", "-q", web.Addr().String())
	if err := flood.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // the flood is on

	// Established connections keep answering, new requests too (from a
	// client that is not spoofed), and an edit is still synced.
	for i, h := range held {
		if a := h.Ask(t); a.Err != "" {
			t.Errorf("held connection %d failed during the flood: %s", i, a.Err)
		}
	}
	answers, err := client.Probe(topo.HTTP, web, 20, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	failed := len(answers.Errors())
	l.writeConfig(t, config(5))
	start := time.Now()
	waitRules(t, dir, "an edit synced during the flood", fmt.Sprintf("-a -t %s -r %s -m -w 5", web, netip.AddrPortFrom(tp.RealServers[0].Addr(tp.Backend), 80)))
	editLatency := time.Since(start)
	ct := conntrackCount(t, dir)
	ipvsConns := ipvsConnCount(t, dir)
	rssDuring, _ := procStatusKiB(pid, "VmRSS")
	_ = flood.Wait() // ends with ctx
	rate := float64(txPackets(t, attacker)-sentBefore) / time.Since(floodStart).Seconds()
	for i, h := range held {
		if a := h.Ask(t); a.Err != "" {
			t.Errorf("held connection %d failed after the flood: %s", i, a.Err)
		}
	}
	hwm, _ := procStatusKiB(pid, "VmHWM")
	t.Logf("SYN flood figures: %.0f SYN/s for %v; new requests failed during it %d/20; edit synced in %v; conntrack entries %d; IPVS connection entries %d; lbd RSS %d KiB before, %d KiB during, peak %d KiB",
		rate, time.Since(floodStart).Round(time.Second), failed, editLatency.Round(time.Millisecond), ct, ipvsConns, rssBefore, rssDuring, hwm)
	// Memory bound: the flood's state lives in the kernel, not in lbd.
	if hwm > 4*rssBefore+64<<10 {
		t.Errorf("lbd's peak RSS %d KiB during a SYN flood; it was %d KiB before", hwm, rssBefore)
	}
}

// lbdPID finds the process of l by its configuration path.
func lbdPID(t *testing.T, l *lbd) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), l.cfgPath) && strings.Contains(string(b), "run") {
			return filepath.Base(filepath.Dir(p))
		}
	}
	t.Fatalf("no process runs lbd with %s", l.cfgPath)
	return ""
}

// conntrackCount is the director's conntrack table size in use.
func conntrackCount(t *testing.T, dir *topo.Director) int {
	t.Helper()
	out := strings.TrimSpace(dir.MustExec(t, "cat", "/proc/sys/net/netfilter/nf_conntrack_count"))
	n, _ := strconv.Atoi(out)
	return n
}

// ipvsConnCount is how many connection entries IPVS holds.
func ipvsConnCount(t *testing.T, dir *topo.Director) int {
	t.Helper()
	out := dir.MustExec(t, "ipvsadm", "-Lnc")
	return max(0, len(strings.Split(strings.TrimSpace(out), "\n"))-2)
}

// txPackets is how many packets n's interfaces sent (ip -s link).
func txPackets(t *testing.T, n *topo.Node) int {
	t.Helper()
	lines := strings.Split(n.MustExec(t, "ip", "-s", "link"), "\n")
	total := 0
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "TX:" && i+1 < len(lines) {
			if v := strings.Fields(lines[i+1]); len(v) > 1 {
				p, _ := strconv.Atoi(v[1])
				total += p
			}
		}
	}
	return total
}
