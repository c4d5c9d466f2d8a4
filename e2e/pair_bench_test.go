//go:build e2e

package e2e

// TestBenchFailover measures box-death failovers of an lbd pair against a
// keepalived pair doing the same job, and the CPU VRRP costs each, in one
// guest run. It runs only with LBD_E2E_FAILBENCH=1 (scripts/bench-failover.sh
// sets it). Figures are reported, not asserted; a failover that does not
// complete, or roles that do not settle, fail it. See docs/benchmarks.md.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// Environment of the benchmark; scripts/bench-failover.sh maps its
// LBD_FAILBENCH_* variables to these (e2e/run.sh passes LBD_E2E_* into
// the guest).
const (
	failBenchEnv         = "LBD_E2E_FAILBENCH"
	failBenchRoundsEnv   = "LBD_E2E_FAILBENCH_ROUNDS"
	failBenchVariantsEnv = "LBD_E2E_FAILBENCH_VARIANTS"
	failBenchCPUEnv      = "LBD_E2E_FAILBENCH_CPU_SECONDS"
)

// Each failover holds this many long-lived connections of each kind.
const benchClientFirst, benchPush = 16, 4

// The pairs' priorities: dir1's, dir2's. No box preempts, so the box
// that comes back after a failover is the backup of the next one, and
// the backup's priority, hence its master-down interval, alternates.
var benchPrio = [2]int{150, 100}

// failVariant is one pair the benchmark fails over.
type failVariant struct {
	key        string
	name       string
	keepalived bool
	version    int
	interval   time.Duration
}

var failVariants = []failVariant{
	{"a", "lbd, v3, 200 ms (lbd's default)", false, 3, 200 * time.Millisecond},
	{"b", "keepalived, v3, advert_int 0.2", true, 3, 200 * time.Millisecond},
	{"c", "keepalived defaults (v2, advert_int 1)", true, 2, time.Second},
	{"d", "lbd, v2, 1 s", false, 2, time.Second},
}

// failRound is what one box death did.
type failRound struct {
	variant    string
	round      int
	backupPrio int
	// downCfg is the configured master-down interval of the backup.
	downCfg time.Duration
	// down is from the cut (the end of the command that took the
	// master's frontend down, which took cutTook) to the backup's
	// transition to MASTER, stamped when its line appeared in the
	// daemon's output; logged is lbd's own time for that line (zero for
	// keepalived).
	down, logged, cutTook time.Duration
	gap                   time.Duration
	// serve is from the MASTER line seen to the first answer after it;
	// announced (lbd only) from lbd's own time for that line to its first
	// gratuitous ARP after it.
	serve, announced time.Duration
	// stale is the backup's conntrack entries of connections to the VIP
	// just before the cut (left from when it last served it); staleHeld
	// those of them with a held connection's client end.
	stale, staleHeld int
	requests, failed int
	errors           string
	lostClient       int
	lostPush         int
	heldLongest      time.Duration
	// resets is the TCP resets sent during the round: by the new
	// master's own stack (a packet to a local VIP that IPVS did not
	// take), by lbd's rules there, by the real servers.
	resets resetCounts
	// unsynced: the backup did not know every held connection within
	// syncLimit before the cut.
	unsynced bool
	// flapped: the backup had become MASTER on its own before the cut.
	flapped bool
}

// syncLimit is how long a round waits for the backup to learn the held
// connections: a working sync takes about 2 s (the kernel's flush).
const syncLimit = 20 * time.Second

func TestBenchFailover(t *testing.T) {
	if os.Getenv(failBenchEnv) != "1" {
		t.Skip("a benchmark: run scripts/bench-failover.sh (sets " + failBenchEnv + "=1)")
	}
	topo.RequireIPVS(t)
	rounds := envInt(t, failBenchRoundsEnv, 20, 1, 200)
	cpuWindow := time.Duration(envInt(t, failBenchCPUEnv, 30, 0, 600)) * time.Second
	variants := benchVariants(t)
	var pairs []*benchPair
	for _, v := range variants {
		pairs = append(pairs, startBenchPair(t, v))
	}
	var cpu []cpuFigure
	var results []failRound
	started := time.Now()
	// The table is printed even when a round ends the test.
	defer func() {
		run := failRun{variants: variants, rounds: rounds, results: results, cpu: cpu, window: cpuWindow,
			took: time.Since(started), falseTakeovers: map[string]int{}}
		for _, bp := range pairs {
			run.falseTakeovers[bp.v.key] = bp.falseTakeovers()
		}
		fmt.Print(failReport(run))
	}()
	if cpuWindow > 0 {
		t.Run("idle CPU", func(t *testing.T) { cpu = measureIdleCPU(t, pairs, cpuWindow) })
	}
	// Interleaved (a, b, c, d, a, ...), so that the guest's noise hits
	// every variant alike.
	for r := 1; r <= rounds; r++ {
		for _, bp := range pairs {
			res := bp.round(t, r)
			t.Logf("round %d %s: gap %dms (master-down %dms measured, %dms configured); %d of %d requests failed; lost %d+%d held",
				r, bp.v.key, res.gap.Milliseconds(), res.down.Milliseconds(), res.downCfg.Milliseconds(),
				res.failed, res.requests, res.lostClient, res.lostPush)
			results = append(results, res)
		}
	}
}

// benchVariants is the variants LBD_E2E_FAILBENCH_VARIANTS names ("a,b";
// all by default).
func benchVariants(t *testing.T) []failVariant {
	t.Helper()
	keys := os.Getenv(failBenchVariantsEnv)
	if keys == "" {
		return failVariants
	}
	var vs []failVariant
	for _, k := range strings.Split(keys, ",") {
		found := false
		for _, v := range failVariants {
			if v.key == strings.TrimSpace(k) {
				vs, found = append(vs, v), true
			}
		}
		if !found {
			t.Fatalf("%s=%q: no variant %q (a, b, c, d)", failBenchVariantsEnv, keys, k)
		}
	}
	return vs
}

// benchPair is one variant's pair, up for the whole benchmark.
type benchPair struct {
	v      failVariant
	p      *pair
	boxes  [2]*vrrpLog
	kas    [2]*keepalived // keepalived's processes (keepalived variants)
	master int
	// takeovers is the rounds' takeovers seen so far.
	takeovers int
}

// startBenchPair builds a variant's topology and starts its pair, dir1
// first, and waits until dir1 is master and dir2 backup.
func startBenchPair(t *testing.T, v failVariant) *benchPair {
	t.Helper()
	bp := &benchPair{v: v, p: newPairTopology(t)}
	p := bp.p
	for i, prio := range benchPrio {
		if v.keepalived {
			kv := kaVersion{name: v.name, keepalived: fmt.Sprintf("advert_int %g\n", v.interval.Seconds())}
			bp.kas[i] = startKeepalived(t, p, i, keepalivedConfig(p, kaBox{v: kv, version: v.version, priority: prio, likeLBD: true}))
			bp.boxes[i] = newVRRPLog(bp.kas[i].Process, keepalivedState)
		} else {
			timing := fmt.Sprintf("version = %d\nadvert_interval = %q\n", v.version, v.interval.String())
			p.boxes[i] = startLBD(t, p.tp.Directors[i], pairConfigVRRP(p.web, p.tp, prio, timing)+syncConfig(p.tp, i))
			bp.boxes[i] = newVRRPLog(p.boxes[i].proc, lbdState)
		}
		want := []string{"MASTER", "BACKUP"}[i]
		bp.waitState(t, i, want, fmt.Sprintf("%s: dir%d %s", v.key, i+1, want))
	}
	bp.settle(t, "after the start")
	waitServes(t, p.client, topo.HTTP, p.web)
	return bp
}

// waitState waits until box i's daemon last logged a transition to state,
// and the box holds the pair's addresses exactly when that is MASTER.
func (bp *benchPair) waitState(t *testing.T, i int, state, what string) {
	t.Helper()
	eventually(t, what, func() error {
		if got := bp.boxes[i].state(); got != state {
			return fmt.Errorf("dir%d is %q", i+1, got)
		}
		return bp.p.holds(i, state == "MASTER")
	})
}

// settle waits until one box is MASTER and the other BACKUP, each with
// the addresses that go with it, and makes the MASTER the one the next
// round kills: usually the one that was, but a false takeover between
// rounds (a backup that missed adverts) may have moved it.
func (bp *benchPair) settle(t *testing.T, when string) {
	t.Helper()
	eventually(t, bp.v.key+": one master and one backup "+when, func() error {
		states := [2]string{bp.boxes[0].state(), bp.boxes[1].state()}
		for m := range 2 {
			if states[m] != "MASTER" || states[1-m] != "BACKUP" {
				continue
			}
			if err := bp.p.holds(m, true); err != nil {
				return err
			}
			if err := bp.p.holds(1-m, false); err != nil {
				return err
			}
			if m != bp.master {
				t.Logf("%s: dir%d is master %s, not dir%d", bp.v.key, m+1, when, bp.master+1)
			}
			bp.master = m
			return nil
		}
		return fmt.Errorf("dir1 is %q, dir2 %q", states[0], states[1])
	})
}

// falseTakeovers is how many times a box became MASTER besides the first
// election and each round's takeover.
func (bp *benchPair) falseTakeovers() int {
	return bp.boxes[0].count("MASTER") + bp.boxes[1].count("MASTER") - 1 - bp.takeovers
}

// round kills the master box (all its links cut) under a paced request
// stream with long-lived connections open, waits for the backup to take
// over, brings the dead box back as the new backup, and returns what it
// measured.
func (bp *benchPair) round(t *testing.T, n int) failRound {
	t.Helper()
	bp.settle(t, fmt.Sprintf("before round %d", n))
	m, b := bp.master, 1-bp.master
	res := failRound{variant: bp.v.key, round: n, backupPrio: benchPrio[b], downCfg: masterDown(bp.v.interval, benchPrio[b])}
	held := bp.p.openHeld(t, benchClientFirst, benchPush)
	// A backup that never learns the connections is a figure of its
	// own, not a reason to stop the run: its round's losses are
	// expected, and counted apart.
	if err := poll.Wait(syncLimit, func() error { return bp.p.synced(b, held.locals()) }); err != nil {
		first, _, _ := strings.Cut(err.Error(), "\n")
		daemons, _ := bp.p.tp.Directors[b].Exec("ipvsadm", "-L", "--daemon")
		t.Logf("%s round %d: after %v, %s; its sync daemons: %s", bp.v.key, n, syncLimit, first, strings.TrimSpace(daemons))
		res.unsynced = true
	}
	resetsBefore := countResets(t, bp.p, b)
	probe := bp.startLossProbe(b)
	res.stale, res.staleHeld = probe.staleEntries(bp.p.web.Addr(), held.locals())
	defer held.reset()
	var masterAt, masterLogged time.Time
	as, gap := streamGap(t, bp.p.client, bp.p.web, func() {
		seen := bp.boxes[b].watch("MASTER")
		// The link goes down in the command, most of which is starting
		// ip under the emulator: the master-down time runs from its end.
		start, cut := bp.p.cutLinks(t, m)
		res.cutTook = cut.Sub(start)
		t.Logf("%s round %d: dir%d's frontend down at %s", bp.v.key, n, m+1, cut.Format("15:04:05.000"))
		bp.waitState(t, b, "MASTER", fmt.Sprintf("%s round %d: dir%d to take over", bp.v.key, n, b+1))
		at, logged := seen()
		if at.IsZero() {
			// It was MASTER already: a false takeover since the round
			// began, so this round measures nothing.
			t.Logf("%s round %d: dir%d was master before the cut (a false takeover); the round is left out", bp.v.key, n, b+1)
			res.flapped = true
			return
		}
		res.down, masterAt, masterLogged = at.Sub(cut), at, logged
		if !logged.IsZero() {
			res.logged = logged.Sub(cut)
		}
	})
	res.gap, res.requests, res.failed, res.errors = gap, len(as), len(as.Errors()), errorKinds(as)
	if !masterAt.IsZero() {
		res.serve = firstAnswerAfter(as, masterAt)
		res.announced = probe.announcedAfter(masterLogged)
		if res.announced > 100*time.Millisecond {
			t.Logf("%s round %d: the first gratuitous ARP came %v after the MASTER line", bp.v.key, n, res.announced)
			probe.logs(t)
		}
	}
	o := held.ask(t, fmt.Sprintf("%s round %d", bp.v.key, n))
	res.lostClient, res.lostPush, res.heldLongest = o.lostClient, o.lostPush, o.longest
	res.resets = countResets(t, bp.p, b).minus(resetsBefore)
	if len(o.lost) > 0 {
		probe.explain(t, o.lost)
	}
	held.reset()
	bp.p.restoreLinks(t, m)
	if !res.flapped {
		bp.takeovers++
	}
	bp.master = b
	bp.settle(t, fmt.Sprintf("after round %d", n))
	return res
}

// vrrpLog follows a VRRP daemon's log for its instance's transitions,
// reading only what is new each time, and stamps each transition when it
// is first read.
type vrrpLog struct {
	proc  *topo.Process
	parse func(line string) (state string, logged time.Time, ok bool)

	mu     sync.Mutex
	mark   int // bytes of output read, up to a whole line
	events []vrrpEvent
}

// vrrpEvent is one transition in a daemon's log: to state, first read at
// seen; logged is the daemon's own time for it, when its log has one.
type vrrpEvent struct {
	state        string
	seen, logged time.Time
}

func newVRRPLog(p *topo.Process, parse func(string) (string, time.Time, bool)) *vrrpLog {
	return &vrrpLog{proc: p, parse: parse}
}

// update reads the new whole lines and returns every transition so far.
func (l *vrrpLog) update() []vrrpEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	text, _ := l.proc.OutputSince(l.mark)
	end := strings.LastIndexByte(text, '\n')
	if end < 0 {
		return l.events
	}
	l.mark += end + 1
	now := time.Now()
	for _, line := range strings.Split(text[:end], "\n") {
		if st, at, ok := l.parse(line); ok {
			l.events = append(l.events, vrrpEvent{st, now, at})
		}
	}
	return l.events
}

// count is how many transitions to state the daemon has logged so far.
func (l *vrrpLog) count(state string) int {
	n := 0
	for _, e := range l.update() {
		if e.state == state {
			n++
		}
	}
	return n
}

// state is the state of the daemon's last transition so far.
func (l *vrrpLog) state() string {
	evs := l.update()
	if len(evs) == 0 {
		return ""
	}
	return evs[len(evs)-1].state
}

// watch starts looking for the daemon's next transition to state, reading
// its output every 2 ms so that the stamp is close to when it was
// written; the returned function, called once the daemon is in state,
// waits a little for the line and returns when it was seen and the
// daemon's own time for it (zeros when there was none: it was in state
// before the watch began).
func (l *vrrpLog) watch(state string) func() (seen, logged time.Time) {
	from := len(l.update()) // what came before is not it
	done := make(chan vrrpEvent, 1)
	go func() {
		deadline := time.Now().Add(settleLimit)
		for time.Now().Before(deadline) {
			for _, e := range l.update()[from:] {
				if e.state == state {
					done <- e
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		done <- vrrpEvent{}
	}()
	return func() (time.Time, time.Time) {
		select {
		case e := <-done:
			return e.seen, e.logged
		case <-time.After(5 * time.Second):
			return time.Time{}, time.Time{}
		}
	}
}

// lbdState reads lbd's "VRRP transition" log lines (text format).
func lbdState(line string) (string, time.Time, bool) {
	if !strings.Contains(line, `msg="VRRP transition"`) || !strings.Contains(line, " instance=outside ") {
		return "", time.Time{}, false
	}
	_, to, ok := strings.Cut(line, " to=")
	if !ok {
		return "", time.Time{}, false
	}
	to, _, _ = strings.Cut(to, " ")
	ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
	at, _ := time.Parse(time.RFC3339Nano, ts)
	return to, at, true
}

// keepalivedState reads keepalived's "(outside) Entering MASTER STATE"
// lines; its console log has no time finer than a second.
func keepalivedState(line string) (string, time.Time, bool) {
	_, rest, ok := strings.Cut(line, "(outside) Entering ")
	if !ok {
		return "", time.Time{}, false
	}
	st, _, ok := strings.Cut(rest, " STATE")
	return st, time.Time{}, ok
}

// resetCounts is how many TCP resets were sent, by origin: the new
// master's own TCP stack, lbd's rules there, the real servers' stacks.
type resetCounts struct {
	stack, rejected, servers int
}

func (c resetCounts) minus(o resetCounts) resetCounts {
	return resetCounts{c.stack - o.stack, c.rejected - o.rejected, c.servers - o.servers}
}

// countResets reads director i's TCP OutRsts (/proc/net/snmp of its
// namespace), the packets lbd's LBD-INPUT rules there rejected with a
// TCP reset (none where lbd does not run), and the real servers' OutRsts.
func countResets(t *testing.T, p *pair, i int) resetCounts {
	t.Helper()
	d := p.tp.Directors[i]
	c := resetCounts{stack: outRsts(t, d.Node)}
	for _, rs := range p.tp.RealServers {
		c.servers += outRsts(t, rs)
	}
	out, err := d.Exec("iptables", "-w", "-nvxL", "LBD-INPUT")
	if err != nil {
		return c // no lbd chain: keepalived's box
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == "REJECT" && strings.Contains(line, "tcp-reset") {
			n, _ := strconv.Atoi(f[0])
			c.rejected += n
		}
	}
	return c
}

// outRsts is the TCP resets a node's stack has sent.
func outRsts(t *testing.T, n *topo.Node) int {
	t.Helper()
	lines := strings.Split(n.MustExec(t, "cat", "/proc/net/snmp"), "\n")
	for i := 0; i+1 < len(lines); i++ {
		names, values := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(names) == 0 || names[0] != "Tcp:" || len(values) != len(names) || values[0] != "Tcp:" {
			continue
		}
		for j, name := range names {
			if name == "OutRsts" {
				v, _ := strconv.Atoi(values[j])
				return v
			}
		}
	}
	t.Fatalf("no Tcp: OutRsts in %s's /proc/net/snmp", n.Host)
	return 0
}
