//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestFaultFirewallWriter: while lbd makes a cold sync, another writer
// changes the firewall with `nft -f`, again and again: a table of its own,
// and rules in iptables' filter table, where lbd has its chains and jumps.
// At the end lbd's part is exactly what lbd plan says and every change of
// the other writer is still there. (The guest's iptables is iptables-nft:
// there is no xtables lock to hold; iptables-legacy is not tested.)
func TestFaultFirewallWriter(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 1})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	f := faultDirector(t, dir)
	l := newLBD(t, dir, "", faultConfig(faultServices(t), staticWeb(tp.RealServers[0].Addr(tp.Backend))))
	want := l.planView(t)
	scripts := t.TempDir()
	l.start()
	// One nft -f after another until lbd has synced, and a few after.
	var writes, before int
	var synced time.Time
	for writes < 250 {
		writes++
		script := filepath.Join(scripts, fmt.Sprintf("w%d.nft", writes))
		if err := os.WriteFile(script, []byte(otherWriter(writes)), 0o644); err != nil {
			t.Fatal(err)
		}
		dir.MustExec(t, "nft", "-f", script)
		if synced.IsZero() && strings.Contains(l.proc.Output(), syncApplied) {
			synced, before = time.Now(), writes
		}
		if !synced.IsZero() && time.Since(synced) > 2*time.Second {
			break
		}
	}
	t.Logf("the other writer ran nft -f %d times, %d of them before lbd's first sync was logged", writes, before)
	waitExact(t, l, want, f, "lbd's part of the kernel after its sync beside the other writer")
	checkOtherWriter(t, dir, writes)
	probeOK(t, tp.ClientHosts[0], topo.HTTP, netip.AddrPortFrom(topo.VIP(1), 80), 5)
}

// otherWriter is the other writer's i-th change: a rule in its own table
// and a rule appended to filter INPUT, each matching a source of its own.
func otherWriter(i int) string {
	return fmt.Sprintf(`add table inet other
add chain inet other in { type filter hook input priority 10; policy accept; }
add rule inet other in ip saddr %s counter
add rule ip filter INPUT ip saddr %s drop
`, otherSource(203, i), otherSource(204, i))
}

// otherSource is the i-th source address of the other writer's rules, in
// 198.18.x.0/24 and the next /24s (away from the topology's segments).
func otherSource(x, i int) netip.Addr {
	return addrPlus(netip.AddrFrom4([4]byte{198, 18, byte(x), 0}), i)
}

// checkOtherWriter fails the test unless each of the other writer's first
// n changes is in the kernel, once.
func checkOtherWriter(t *testing.T, dir *topo.Director, n int) {
	t.Helper()
	own := dir.MustExec(t, "nft", "list", "table", "inet", "other")
	filter := strings.Split(dir.MustExec(t, "iptables-save", "-t", "filter"), "\n")
	for i := 1; i <= n; i++ {
		if c := strings.Count(own, "ip saddr "+otherSource(203, i).String()+" counter"); c != 1 {
			t.Errorf("the other writer's table has its rule %d %d times", i, c)
		}
		rule := fmt.Sprintf("-A INPUT -s %s/32 -j DROP", otherSource(204, i))
		if c := countLines(filter, rule); c != 1 {
			t.Errorf("filter INPUT has %q %d times", rule, c)
		}
	}
}

func countLines(lines []string, l string) int {
	n := 0
	for _, x := range lines {
		if strings.TrimSpace(x) == l {
			n++
		}
	}
	return n
}

// TestFaultNeighbourIPVS: IPVS virtual servers in another network
// namespace of the box (a container runtime's, another lbd's) change
// nothing for lbd: its periodic full sync and a restart over a correct
// kernel find nothing to write, and no request fails meanwhile.
func TestFaultNeighbourIPVS(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 1})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	f := faultDirector(t, dir)
	neighbour := fmt.Sprintf("%s-nb", tp.ID)
	addBenchNetns(t, neighbour, false)
	var rules strings.Builder
	for i := range neighbourServices {
		vs := netip.AddrPortFrom(addrPlus(neighbourVIPBase, i), 80)
		fmt.Fprintf(&rules, "-A -t %s -s rr\n-a -t %s -r 198.19.0.1:80 -m -w 1\n", vs, vs)
	}
	restore := osexec.Command("ip", "netns", "exec", neighbour, "ipvsadm", "-R")
	restore.Stdin = strings.NewReader(rules.String())
	if out, err := restore.CombinedOutput(); err != nil {
		t.Fatalf("ipvsadm -R in the neighbour namespace: %v: %s", err, out)
	}
	config := withSyncPeriod(faultConfig(faultServices(t), staticWeb(tp.RealServers[0].Addr(tp.Backend))), "5s")
	l := newLBD(t, dir, "", config)
	l.start()
	waitExact(t, l, l.planView(t), f, "the first sync")
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	waitServes(t, client, topo.HTTP, web)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(procIPVSCount(dir))
		}
	})
	underStream(t, client, web, func() {
		mark := len(l.proc.Output())
		var periodic string
		eventually(t, "a periodic full sync", func() error {
			for _, line := range strings.Split(sinceLog(l.proc, mark), "\n") {
				if strings.Contains(line, "reason=periodic") {
					periodic = line
					return nil
				}
			}
			return fmt.Errorf("none logged yet")
		})
		if !strings.Contains(periodic, "kernel already up to date") {
			t.Errorf("the periodic full sync over a correct kernel: %s", periodic)
		}
		l.kill(t)
		if got := waitFirstSync(t, l); !strings.Contains(got, "kernel already up to date") {
			t.Errorf("the restart's first sync over a correct kernel: %s", got)
		}
	})
}

// procIPVSCount says how many virtual servers the director's
// /proc/net/ip_vs lists (read in small chunks, by cat) against netlink's
// count (ipvsadm): lbd reads destinations from that file.
func procIPVSCount(dir *topo.Director) string {
	proc, err1 := dir.Exec("cat", "/proc/net/ip_vs")
	nl, err2 := dir.Exec("ipvsadm", "-Ln")
	count := func(s string) int { return strings.Count(s, "\nTCP ") + strings.Count(s, "\nUDP ") }
	return fmt.Sprintf("virtual servers in /proc/net/ip_vs: %d; in ipvsadm -Ln: %d (%v %v)", count(proc), count(nl), err1, err2)
}

// The neighbour namespace's virtual servers: as many as make
// /proc/net/ip_vs of either namespace longer than one read.
var neighbourVIPBase = netip.MustParseAddr("198.18.64.1")

const neighbourServices = 300
