//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
	"github.com/lbdproject/lbd/status"
)

// The IPv6 twins of the pair's floating addresses, for TestPairIPv6.
var (
	pairOutside6 = netip.MustParsePrefix("2001:2:0:2::10/64")
	pairInside6  = netip.MustParsePrefix("2001:2:0:3::10/64")
)

// TestPairBoxDeath: the master box dies (every link cut) under a paced
// stream of short requests and with long-lived connections open, both
// client-first (a request every 100 ms) and server-first (the real server
// pushes a line every 100 ms; the client only reads). The backup takes
// over when the adverts stop, new connections flow through it, and the
// long-lived ones it learned by connection sync continue.
func TestPairBoxDeath(t *testing.T) {
	p := newPairTopology(t)
	p.startInOrder(t, func(i, prio int) string { return pairConfig(p.web, p.tp, prio, "") + syncConfig(p.tp, i) }, p.waitRoles)
	const clientFirst, push = 24, 8
	held := p.holdMixed(t, clientFirst, push, 1)
	var cut, cutDone time.Time
	as, gap := streamGap(t, p.client, p.web, func() {
		cut, cutDone = p.cutLinks(t, 0)
		p.waitMaster(t, 1, "dir2 to take over from the dead box")
	})
	at, ok := transitionAt(p.boxes[1].proc.Output(), "outside", "MASTER")
	if !ok {
		t.Fatalf("dir2's log has no transition to MASTER:\n%s", p.boxes[1].proc.Output())
	}
	// The master-down interval as seen from outside: from the end of the
	// command that took the frontend down (most of it is starting ip
	// under the emulator; the link went down near its end) to the
	// backup's MASTER in its log; its timer runs from the last advert
	// heard, up to an advert interval before the cut.
	t.Logf("FIGURE box death: gap %dms (master-down interval %dms)", gap.Milliseconds(), at.Sub(cutDone).Milliseconds())
	t.Logf("the frontend-down command took %dms; dir2's master-down interval is %dms after the last advert it heard",
		cutDone.Sub(cut).Milliseconds(), masterDown(200*time.Millisecond, 100).Milliseconds())
	t.Logf("FIGURE box death: %d of %d short requests failed (%s)", len(as.Errors()), len(as), errorKinds(as))
	if v, err := p.vrrpState(0); err == nil {
		t.Logf("the dead box's own view: %s (%d transitions)", v.State, v.Transitions)
	}
	// In FAULT it gave the VIP up, and with it its connections' conntrack
	// entries: met stale at a later takeover, they reset connections
	// (dataplane/conntrack).
	eventually(t, "the dead box to forget the VIP's conntrack entries", func() error {
		out := p.tp.Directors[0].MustExec(t, "sh", "-c", "conntrack -L -d "+p.web.Addr().String()+" 2>/dev/null")
		if n := strings.Count(out, "\n"); n > 0 {
			return fmt.Errorf("%d entries left:\n%s", n, out)
		}
		return nil
	})
	// A real box death loses what the dead box had not yet sent to its
	// peer; these were synced before the cut, so a loss is a figure. Losing
	// most of them is no longer timing: the backup did not carry them on
	// (sync, or the real servers' neighbours not following the new master).
	o := held.ask(t, "after the box death")
	if o.lostClient > clientFirst/2 || o.lostPush > push/2 {
		t.Errorf("more than half of a kind of long-lived connections lost: %d of %d client-first, %d of %d server-first",
			o.lostClient, clientFirst, o.lostPush, push)
	}
	if per := probeOK(t, p.client, topo.HTTP, p.web, 6).ByServer(); len(per) != 2 {
		t.Errorf("new connections through dir2 reached %v; want both real servers", per)
	}
}

// TestPairPreempt: with preempt on, the old master, of higher priority,
// comes back after a planned stop and takes the addresses over again, but
// only after preempt_delay. What the second move loses among connections
// opened while it was away depends on whether its kernel heard their sync
// meanwhile: stopping lbd leaves the kernel's sync daemons running, a
// reboot does not (emulated by stopping the backup daemon). Both losses
// are figures.
func TestPairPreempt(t *testing.T) {
	const delay = 2 * time.Second
	p := newPairTopology(t)
	extra := fmt.Sprintf("preempt = true\npreempt_delay = %q\n", delay.String())
	p.startInOrder(t, func(i, prio int) string { return pairConfig(p.web, p.tp, prio, extra) + syncConfig(p.tp, i) }, p.waitRoles)
	for _, tc := range []struct {
		name string
		away func(t *testing.T, d *topo.Director) // on dir1 while its lbd is stopped
		// held is how many long-lived connections are opened; fewer where
		// all are expected lost, as a lost one may take a request timeout.
		held int
	}{
		{"lbd restarted", nil, 20},
		{"box rebooted", func(t *testing.T, d *topo.Director) { d.MustExec(t, "ipvsadm", "--stop-daemon", "backup") }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) { p.preemptRound(t, delay, tc.away, tc.held) })
	}
}

// preemptRound stops lbd on dir1 (master), opens long-lived connections
// through dir2, starts dir1 again and waits for it to preempt.
func (p *pair) preemptRound(t *testing.T, delay time.Duration, away func(*testing.T, *topo.Director), n int) {
	dir1 := p.tp.Directors[0]
	if err := p.boxes[0].proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitRoles(t, "dir2 to take over on the planned stop", "", "MASTER")
	if away != nil {
		away(t, dir1)
	}
	var held []*topo.Held
	for range n {
		h := p.client.Hold(t, p.web)
		t.Cleanup(h.Reset)
		held = append(held, h)
	}
	// Past the kernel's 2 s sync flush: what dir1 will ever hear of them
	// while its lbd is stopped.
	_ = poll.Wait(3*time.Second, func() error {
		if established(t, dir1) < n {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	known := established(t, dir1)
	var started time.Time
	var knownAtMaster int
	as := streamAround(t, p.client, p.web, func() {
		started = time.Now()
		p.boxes[0].start()
		p.sampleUntilMaster(t, delay)
		p.waitRoles(t, "dir1 to preempt dir2", "MASTER", "BACKUP")
		knownAtMaster = established(t, dir1)
	})
	out := p.boxes[0].proc.Output()
	begin, ok1 := transitionAt(out, "outside", "BACKUP")
	master, ok2 := transitionAt(out, "outside", "MASTER")
	if !ok1 || !ok2 {
		t.Fatalf("dir1's log lacks its transitions to BACKUP and MASTER:\n%s", out)
	}
	t.Logf("FIGURE preempt: dir1 master %dms after its lbd started, %dms after its VRRP instance started (preempt_delay %v)",
		master.Sub(started).Milliseconds(), master.Sub(begin).Milliseconds(), delay)
	if master.Sub(begin) < delay {
		t.Errorf("dir1 preempted %v after its instance started, before preempt_delay %v", master.Sub(begin), delay)
	}
	t.Logf("FIGURE preempt: %d short requests failed in the second move (%s)", len(as.Errors()), errorKinds(as))
	t.Logf("FIGURE preempt: dir1's kernel had %d established connections before its lbd started, %d when it took over (%d opened while it was away)",
		known, knownAtMaster, n)
	countLost(t, held, "after the preemption")
	probeOK(t, p.client, topo.HTTP, p.web, 4)
}

// sampleUntilMaster polls box 0's lbd status from its start until it is
// master, and fails the test if it is master within delay of its
// instance's start (the BACKUP state's since). lbd may take longer than
// delay to answer at all under the emulator: the samples are counted.
func (p *pair) sampleUntilMaster(t *testing.T, delay time.Duration) {
	t.Helper()
	var begin time.Time
	backups := 0
	err := waitFine(settleLimit, func() error {
		v, err := p.vrrpState(0)
		now := time.Now()
		switch {
		case err != nil:
			return err
		case v.State == "BACKUP":
			begin = v.Since
			if now.Before(begin.Add(delay)) {
				backups++
			}
		case v.State == "MASTER":
			if !begin.IsZero() && now.Before(begin.Add(delay)) {
				t.Errorf("dir1 master %v after its instance started, before preempt_delay %v", now.Sub(begin), delay)
			}
			return nil
		}
		return fmt.Errorf("dir1 is %s", v.State)
	})
	if err != nil {
		t.Fatalf("dir1 did not become master: %v", err)
	}
	t.Logf("dir1: %d status samples said BACKUP within preempt_delay of its instance's start", backups)
}

// TestPairIPv6: an IPv6 VIP fails over with its own VRRP instance (family
// 6), in one sync group with the IPv4 one. On a planned stop of the
// master the router's neighbour entry for the IPv6 outside floating
// address moves to the new master's MAC from lbd's unsolicited neighbour
// advertisements, without the router soliciting, and the IPv6 VIP
// answers through the other box.
func TestPairIPv6(t *testing.T) {
	p, web6 := startPair6(t)
	tp := p.tp
	waitServes(t, p.client, topo.HTTP, web6)
	probeOK(t, p.client, topo.HTTP, web6, 4)
	macs := [2]string{linkMAC(t, tp.Directors[0], tp.Frontend.Name), linkMAC(t, tp.Directors[1], tp.Frontend.Name)}
	eventually(t, "the router's neighbour entry on dir1", func() error {
		_, err := routerNeigh6(p, macs[0])
		return err
	})
	// No IPv6 traffic from now until the entry moved: only the
	// advertisements can move it, and the router has no reason to solicit.
	solicits := neighSolicits(t, tp.Router, tp.Frontend.Name)
	if err := p.boxes[0].proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var entry string
	if err := waitFine(settleLimit, func() (err error) { entry, err = routerNeigh6(p, macs[1]); return err }); err != nil {
		t.Fatalf("the router's neighbour entry did not move to dir2 (%s): %v", macs[1], err)
	}
	moved := time.Since(stopped)
	sent := neighSolicits(t, tp.Router, tp.Frontend.Name) - solicits
	t.Logf("FIGURE IPv6 failover: the router's entry for %s on dir2's MAC %dms after the SIGTERM (%s); router solicitations meanwhile: %d",
		pairOutside6.Addr(), moved.Milliseconds(), strings.TrimSpace(entry), sent)
	if sent != 0 {
		t.Errorf("the router sent %d neighbour solicitations on the frontend while the entry moved; want none (unsolicited advertisements)", sent)
	}
	p.waitRoles6(t, "dir2 master of both instances", "", "MASTER")
	if per := probeOK(t, p.client, topo.HTTP, web6, 6).ByServer(); len(per) != 2 {
		t.Errorf("the IPv6 VIP through dir2 reached %v; want both real servers", per)
	}
	if out := tp.Directors[1].MustExec(t, "ipvsadm", "-Lnc"); !strings.Contains(out, web6.Addr().String()) {
		t.Errorf("dir2's IPVS has no connection to %s after the failover:\n%s", web6.Addr(), out)
	}
	probeOK(t, p.client, topo.HTTP, p.web, 2) // the IPv4 instance moved with it
}

// startInOrder starts lbd on dir1 (priority 150) and waits until it is
// master, then on dir2 (100). startPair starts both at once, and then the
// box whose instance happens to start first can win the first election
// whatever its priority (the master-down intervals differ by 39 ms), and
// keeps it without preempt. config is box i's configuration; roles waits
// for the boxes' states (waitRoles or waitRoles6).
func (p *pair) startInOrder(t *testing.T, config func(i, priority int) string, roles func(*testing.T, string, ...string)) {
	t.Helper()
	for i, prio := range []int{150, 100} {
		p.boxes[i] = startLBD(t, p.tp.Directors[i], config(i, prio))
		roles(t, fmt.Sprintf("dir%d started", i+1), []string{"MASTER", "BACKUP"}[:i+1]...)
		p.waitFirstSync(t, i)
	}
	waitServes(t, p.client, topo.HTTP, p.web)
}

// waitFirstSync waits until box i's lbd has run its first dataplane sync
// (its VRRP instances start only then), so that a test's fault never
// meets a box that is still starting.
func (p *pair) waitFirstSync(t *testing.T, i int) {
	t.Helper()
	eventually(t, fmt.Sprintf("dir%d's first sync", i+1), func() error {
		s, err := p.snapshot(i)
		if err != nil {
			return err
		}
		if s.Sync.Time.IsZero() || s.Sync.Waiting || s.Sync.Error != "" {
			return fmt.Errorf("dir%d: last sync %+v", i+1, s.Sync)
		}
		return nil
	})
}

// syncConfig is box i's IPVS connection sync, as startPair's: on the
// inside link, from the other box only.
func syncConfig(tp *topo.Topology, i int) string {
	return fmt.Sprintf("\n[ha.ipvs_sync]\ninterface = %q\nsync_id = 51\npeer = %q\n",
		tp.Backend.Name, tp.Directors[1-i].Addr(tp.Backend))
}

// startPair6 starts a pair carrying web on the IPv4 instance and web6 on
// an IPv6 one, both in one sync group, with the IPv6 routes through the
// IPv6 floating addresses.
func startPair6(t *testing.T) (*pair, netip.AddrPort) {
	t.Helper()
	p := newPairTopology(t)
	tp := p.tp
	tp.Router.MustExec(t, "ip", "-6", "route", "replace", topo.VIPPrefix6.String(), "via", pairOutside6.Addr().String())
	for _, rs := range tp.RealServers {
		rs.MustExec(t, "ip", "-6", "route", "replace", "default", "via", pairInside6.Addr().String())
	}
	web6 := netip.AddrPortFrom(topo.VIP6(1), 80)
	p.startInOrder(t, func(i, prio int) string {
		return pairConfig(p.web, tp, prio, "") + pair6Config(tp, web6, prio) + syncConfig(tp, i)
	}, p.waitRoles6)
	return p, web6
}

// pair6Config is the IPv6 half of a box's configuration: a service on
// web6 and an instance of family 6 carrying it, grouped with pairConfig's
// "outside". It shares the IPv4 instance's virtual router id, as the
// configuration allows (one per interface and family).
func pair6Config(tp *topo.Topology, web6 netip.AddrPort, priority int) string {
	var reals []string
	for _, rs := range tp.RealServers {
		reals = append(reals, fmt.Sprintf("{ address = %q }", rs.Addr6(tp.Backend)))
	}
	return fmt.Sprintf(`
[[service]]
name = "web6"
vips = ["%s"]
port = %d
scheduler = "rr"
snat = "never"
health_check = { type = "none" }
real_server = [%s]

[[vrrp]]
name = "outside6"
interface = "%s"
virtual_router_id = 51
priority = %d
advert_interval = "200ms"
addresses = ["%s", "%s dev %s"]
services = ["web6"]
track_interfaces = ["%s"]

[[vrrp_sync_group]]
name = "pair"
instances = ["outside", "outside6"]
`, web6.Addr(), web6.Port(), strings.Join(reals, ", "), tp.Frontend.Name, priority,
		pairOutside6, pairInside6, tp.Backend.Name, tp.Backend.Name)
}

// waitRoles6 is waitRoles for the two-instance pair: every instance of
// box i in state want[i] ("" for a box whose lbd is not running), and the
// box holding all the IPv4 and IPv6 addresses exactly when master.
func (p *pair) waitRoles6(t *testing.T, what string, want ...string) {
	t.Helper()
	eventually(t, what, func() error {
		for i, w := range want {
			if w != "" {
				vs, err := p.vrrpStates(i)
				if err != nil {
					return err
				}
				for _, v := range vs {
					if v.State != w {
						return fmt.Errorf("dir%d: %s is %s, want %s", i+1, v.Name, v.State, w)
					}
				}
			}
			if err := p.holds(i, w == "MASTER"); err != nil {
				return err
			}
			if err := p.holds6(i, w == "MASTER"); err != nil {
				return err
			}
		}
		return nil
	})
}

// snapshot is box i's lbd status.
func (p *pair) snapshot(i int) (status.Snapshot, error) {
	l := p.boxes[i]
	var s status.Snapshot
	out, err := l.dir.Exec(l.bin, "status", "-o", "json", "--socket", l.socket())
	if err != nil {
		return s, fmt.Errorf("lbd status on dir%d: %v: %s", i+1, err, out)
	}
	return s, json.Unmarshal([]byte(out), &s)
}

// vrrpStates is every instance of box i as lbd status shows them.
func (p *pair) vrrpStates(i int) ([]status.VRRP, error) {
	s, err := p.snapshot(i)
	if err != nil {
		return nil, err
	}
	if len(s.VRRP) != 2 {
		return nil, fmt.Errorf("dir%d: %d VRRP instances in status, want 2 (%s)", i+1, len(s.VRRP), s.VRRPError)
	}
	return s.VRRP, nil
}

// holds6 checks that box i holds the IPv6 floating addresses and VIP, or
// none of them.
func (p *pair) holds6(i int, master bool) error {
	out, err := p.tp.Directors[i].Exec("ip", "-o", "-6", "addr", "show")
	if err != nil {
		return err
	}
	for _, a := range []string{pairOutside6.String(), pairInside6.String(), topo.VIP6(1).String() + "/128"} {
		if strings.Contains(out, " "+a+" ") != master {
			return fmt.Errorf("dir%d (master %v): address %s bound %v:\n%s", i+1, master, a, !master, out)
		}
	}
	return nil
}

// routerNeigh6 returns the router's neighbour entry for the IPv6 outside
// floating address, or an error unless it has lladdr mac.
func routerNeigh6(p *pair, mac string) (string, error) {
	out, err := p.tp.Router.Exec("ip", "-6", "neigh", "show", pairOutside6.Addr().String(), "dev", p.tp.Frontend.Name)
	if err != nil || !strings.Contains(out, "lladdr "+mac+" ") {
		return out, fmt.Errorf("router: %q (%v), want lladdr %s", out, err, mac)
	}
	return out, nil
}

// neighSolicits is how many neighbour solicitations the node has sent on
// link (its per-interface ICMPv6 counters).
func neighSolicits(t *testing.T, n *topo.Node, link string) int {
	t.Helper()
	out := n.MustExec(t, "cat", "/proc/net/dev_snmp6/"+link)
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "Icmp6OutNeighborSolicits" {
			v, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no Icmp6OutNeighborSolicits in %s's dev_snmp6/%s:\n%s", n.Host, link, out)
	return 0
}

// linkMAC is the MAC address of the director's link.
func linkMAC(t *testing.T, d *topo.Director, link string) string {
	t.Helper()
	return strings.TrimSpace(d.MustExec(t, "cat", "/sys/class/net/"+link+"/address"))
}
