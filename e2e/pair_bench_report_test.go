//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// Markers of the failover benchmark's table; scripts/bench-failover.sh
// looks for them.
const (
	failReportBegin = "==== lbd failover benchmark ===="
	failReportEnd   = "==== end of lbd failover benchmark ===="
)

// userHZ is the unit of /proc/PID/stat's CPU times: USER_HZ, 100 on every
// architecture Linux runs this on.
const userHZ = 100

// cpuFigure is the CPU time one daemon process used while its pair idled.
type cpuFigure struct {
	name string
	cpu  time.Duration
}

// cpuWatch is a process whose CPU time is being measured.
type cpuWatch struct {
	name   string
	pid    int
	before time.Duration
}

// measureIdleCPU measures, over window, the CPU time of each pair's
// daemons while nothing fails over, and of an lbd with the same services
// and no [[vrrp]] (in a topology of its own, removed afterwards): what
// VRRP itself costs is the difference.
func measureIdleCPU(t *testing.T, pairs []*benchPair, window time.Duration) []cpuFigure {
	t.Helper()
	var ws []cpuWatch
	add := func(name string, pid int, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		before, err := procCPU(pid)
		if err != nil {
			t.Fatalf("%s (pid %d): %v", name, pid, err)
		}
		ws = append(ws, cpuWatch{name, pid, before})
	}
	solo := startSoloLBD(t)
	for _, bp := range pairs {
		for _, r := range []struct {
			role string
			box  int
		}{{"master", bp.master}, {"backup", 1 - bp.master}} {
			name := bp.v.key + " " + r.role
			if !bp.v.keepalived {
				add(name+": lbd run", bp.p.boxes[r.box].proc.Pid(), nil)
				continue
			}
			for _, f := range []struct{ what, file string }{{"VRRP process", "v.pid"}, {"checker process", "c.pid"}, {"parent", "k.pid"}} {
				pid, err := bp.kas[r.box].pid(f.file)
				add(name+": keepalived "+f.what, pid, err)
			}
		}
	}
	add("lbd run without [[vrrp]]", solo.proc.Pid(), nil)
	time.Sleep(window)
	var figs []cpuFigure
	for _, w := range ws {
		after, err := procCPU(w.pid)
		if err != nil {
			t.Fatalf("%s (pid %d): %v", w.name, w.pid, err)
		}
		figs = append(figs, cpuFigure{w.name, after - w.before})
	}
	return figs
}

// startSoloLBD runs lbd with the pair's services and no [[vrrp]] on a
// director of its own, and waits for its first sync and a little more,
// so that what follows is idle.
func startSoloLBD(t *testing.T) *lbd {
	t.Helper()
	tp := topo.New(t, topo.Options{Directors: 1, RealServers: 2})
	solo := &pair{tp: tp, web: webVIP()}
	solo.boxes[0] = startLBD(t, tp.Directors[0], pairServices(solo.web, tp))
	solo.waitFirstSync(t, 0)
	time.Sleep(5 * time.Second)
	return solo.boxes[0]
}

// procCPU is the user and system CPU time a process has used.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name (which may hold spaces) start
	// with the state, the 3rd field: utime and stime are the 14th and 15th.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// variantStats sums up one variant's rounds.
type variantStats struct {
	rounds int
	// gap and down per round; gapX is each gap over its configured
	// master-down interval.
	gap, down []time.Duration
	gapX      []float64
	// lag: when lbd's transition was seen in its output, after its log
	// time for it (the stamping's own delay).
	lag []time.Duration
	// serve: from the MASTER line seen to the first answer; announced
	// (lbd): from lbd's MASTER line to its first gratuitous ARP.
	serve, announced []time.Duration
	// stale sums the backups' conntrack entries to the VIP before the
	// cuts, staleHeld those with a held connection's client end.
	stale, staleHeld     int
	failed, requests     int
	lostClient, lostPush int // in the rounds whose backup knew them
	heldLongest          []time.Duration
	// synced and unsynced count the rounds whose backup knew every held
	// connection before the cut, and those whose backup did not.
	synced, unsynced int
	// within: rounds whose gap is within the configured master-down
	// interval + 100 ms.
	within           int
	downMin, downMax time.Duration // configured master-down intervals
	// flapped rounds had a false takeover before their cut: left out.
	flapped int
}

func statsOf(rs []failRound) variantStats {
	var s variantStats
	for _, r := range rs {
		if r.flapped {
			s.flapped++
			continue
		}
		s.rounds++
		s.gap = append(s.gap, r.gap)
		s.down = append(s.down, r.down)
		s.gapX = append(s.gapX, float64(r.gap)/float64(r.downCfg))
		if r.logged != 0 {
			s.lag = append(s.lag, r.down-r.logged)
		}
		if r.serve != 0 {
			s.serve = append(s.serve, r.serve)
		}
		if r.announced != 0 {
			s.announced = append(s.announced, r.announced)
		}
		s.stale += r.stale
		s.staleHeld += r.staleHeld
		s.failed += r.failed
		s.requests += r.requests
		if r.unsynced {
			s.unsynced++
		} else {
			s.synced++
			s.lostClient += r.lostClient
			s.lostPush += r.lostPush
			s.heldLongest = append(s.heldLongest, r.heldLongest)
		}
		if r.gap <= r.downCfg+100*time.Millisecond {
			s.within++
		}
		if s.downMin == 0 || r.downCfg < s.downMin {
			s.downMin = r.downCfg
		}
		s.downMax = max(s.downMax, r.downCfg)
	}
	return s
}

// worst is the largest of ds, 0 for none.
func worst[T time.Duration | float64](xs []T) T {
	var w T
	for _, x := range xs {
		w = max(w, x)
	}
	return w
}

func medianFloat(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	switch n := len(s); {
	case n == 0:
		return 0
	case n%2 == 1:
		return s[n/2]
	default:
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// lostMark is a round's lost connections, client-first+server-first,
// marked * when its backup had not learned them.
func lostMark(r failRound) string {
	m := fmt.Sprintf("%d+%d", r.lostClient, r.lostPush)
	if r.unsynced {
		m += "*"
	}
	if r.flapped {
		m += "F"
	}
	return m
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func times(x float64) string { return fmt.Sprintf("%.2f×", x) }

func ratio[T time.Duration | float64](a, b T) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(a)/float64(b))
}

// failRun is what the benchmark measured.
type failRun struct {
	variants []failVariant
	rounds   int // asked for
	results  []failRound
	cpu      []cpuFigure
	window   time.Duration // of the CPU figures
	took     time.Duration
	// falseTakeovers per variant: transitions to MASTER besides the
	// first election and the rounds' takeovers.
	falseTakeovers map[string]int
}

// failReport is the benchmark's table: per variant, then the ratios and
// targets, the idle CPU, and every round.
func failReport(run failRun) string {
	variants, rounds, results, cpu, window, took := run.variants, run.rounds, run.results, run.cpu, run.window, run.took
	var b strings.Builder
	osRelease, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	fmt.Fprintf(&b, "\n%s\n", failReportBegin)
	fmt.Fprintf(&b, "box death (frontend then backend link of the master down), %d rounds per variant asked, interleaved; kernel %s; %s; took %v\n",
		rounds, strings.TrimSpace(string(osRelease)), time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	fmt.Fprintf(&b, "each failover: a paced stream (a request every %v, new connection each) and %d client-first (a request every %v) + %d server-first (a line every %v) long-lived connections\n",
		pacedEvery, benchClientFirst, heldEvery, benchPush, topo.PushEvery)
	var cutTook []time.Duration
	for _, r := range results {
		cutTook = append(cutTook, r.cutTook)
	}
	fmt.Fprintf(&b, "down = from the end of the command that took the master's frontend down (it took a median %d ms, worst %d ms) to the backup's MASTER line seen in its output\n",
		median(cutTook).Milliseconds(), worst(cutTook).Milliseconds())
	fmt.Fprintf(&b, "MD = configured master-down interval (3×interval + skew, skew = (256-prio)/256×interval; backups of priority %d and %d alternate)\n\n",
		benchPrio[1], benchPrio[0])
	stats := map[string]variantStats{}
	fmt.Fprintf(&b, "%-42s %6s %9s %13s %13s %15s %13s %14s %13s %9s\n", "variant", "rounds", "MD ms", "down ms med/max", "gap ms med/max", "gap/MD med/max", "serve med/max", "failed req", "lost c/p", "held gap")
	for _, v := range variants {
		var rs []failRound
		for _, r := range results {
			if r.variant == v.key {
				rs = append(rs, r)
			}
		}
		s := statsOf(rs)
		stats[v.key] = s
		fmt.Fprintf(&b, "%-42s %6d %9s %13s %13s %15s %13s %14s %13s %9s\n", v.key+" "+v.name, s.rounds,
			ms(s.downMax)+"/"+ms(s.downMin), ms(median(s.down))+"/"+ms(worst(s.down)), ms(median(s.gap))+"/"+ms(worst(s.gap)),
			times(medianFloat(s.gapX))+"/"+times(worst(s.gapX)), ms(median(s.serve))+"/"+ms(worst(s.serve)), fmt.Sprintf("%d/%d", s.failed, s.requests),
			fmt.Sprintf("%d/%d %d/%d", s.lostClient, s.synced*benchClientFirst, s.lostPush, s.synced*benchPush), ms(median(s.heldLongest)))
		if n := run.falseTakeovers[v.key]; n != 0 {
			fmt.Fprintf(&b, "  %s: %d false takeovers: a backup became MASTER while the master was alive (missed adverts); %d rounds with one before their cut are left out (marked F)\n",
				v.key, n, s.flapped)
		}
		if s.stale > 0 {
			fmt.Fprintf(&b, "  %s: the backups held %d conntrack entries to the VIP before the cuts (left from when they last served it), %d of them with a held connection's client end\n",
				v.key, s.stale, s.staleHeld)
		}
		if s.unsynced > 0 {
			fmt.Fprintf(&b, "  %s: in %d rounds the backup had not learned every held connection %v after they were opened (rounds marked *); their losses are not in lost c/p\n",
				v.key, s.unsynced, syncLimit)
		}
	}
	b.WriteString("\n")
	writeComparisons(&b, stats)
	writeCPU(&b, cpu, window)
	writeRounds(&b, results)
	fmt.Fprintf(&b, "%s\n", failReportEnd)
	return b.String()
}

// writeComparisons writes the ratios lbd/keepalived and the targets.
func writeComparisons(b *strings.Builder, stats map[string]variantStats) {
	for _, c := range []struct{ lbd, ka, what string }{{"a", "b", "200 ms, v3"}, {"d", "c", "1 s, v2"}} {
		l, lok := stats[c.lbd]
		k, kok := stats[c.ka]
		if !lok || !kok || l.rounds == 0 || k.rounds == 0 {
			continue
		}
		fmt.Fprintf(b, "lbd/keepalived at %s (%s/%s): median gap %s, worst gap %s, median gap/MD %s, median master-down %s\n",
			c.what, c.lbd, c.ka, ratio(median(l.gap), median(k.gap)), ratio(worst(l.gap), worst(k.gap)),
			ratio(medianFloat(l.gapX), medianFloat(k.gapX)), ratio(median(l.down), median(k.down)))
		fmt.Fprintf(b, "  from the MASTER line seen to the first answer: lbd median %s ms (worst %s), keepalived %s ms (worst %s)\n",
			ms(median(l.serve)), ms(worst(l.serve)), ms(median(k.serve)), ms(worst(k.serve)))
		fmt.Fprintf(b, "  target: lbd's gap no worse than keepalived's at the same interval: median %s, worst %s\n",
			verdict(median(l.gap) <= median(k.gap)), verdict(worst(l.gap) <= worst(k.gap)))
	}
	for _, key := range []string{"a", "d"} {
		s, ok := stats[key]
		if !ok || s.rounds == 0 {
			continue
		}
		fmt.Fprintf(b, "  target (%s): gap within one master-down interval + 100 ms: %d of %d rounds, worst %s ms against %s ms: %s\n",
			key, s.within, s.rounds, ms(worst(s.gap)), ms(s.downMax+100*time.Millisecond), verdict(s.within == s.rounds))
		if len(s.announced) > 0 {
			fmt.Fprintf(b, "  (%s) lbd's first gratuitous ARP came a median %s ms after its MASTER line (worst %s ms), by its own log times\n",
				key, ms(median(s.announced)), ms(worst(s.announced)))
		}
		if len(s.lag) > 0 {
			fmt.Fprintf(b, "  (%s) a transition was seen in lbd's output a median %s ms after lbd's own log time for it (worst %s ms)\n",
				key, ms(median(s.lag)), ms(worst(s.lag)))
		}
	}
	b.WriteString("\n")
}

// writeCPU writes the idle CPU figures.
func writeCPU(b *strings.Builder, cpu []cpuFigure, window time.Duration) {
	if len(cpu) == 0 {
		return
	}
	fmt.Fprintf(b, "idle CPU over %v (utime+stime from /proc/PID/stat, all pairs idle at once):\n", window)
	for _, c := range cpu {
		fmt.Fprintf(b, "  %-52s %7.2f s  %5.2f %% of a CPU\n", c.name, c.cpu.Seconds(), 100*c.cpu.Seconds()/window.Seconds())
	}
}

// lossProbe keeps, from just before a round's cut, what the backup's
// IPVS and conntrack held and where both boxes' logs were, so that a lost
// held connection can be explained afterwards: which real server IPVS
// sends it to, how conntrack tracks it (a reply port other than the
// client's is a source the real server does not know), whether the real
// server still has it, and what the daemons did meanwhile.
type lossProbe struct {
	bp       *benchPair
	b        int // the backup, master after the cut
	ipvs, ct string
	ctStats  string
	logMarks [2]int
}

// staleEntries counts the backup's conntrack entries (from just before
// the cut) of connections to vip, and of those the ones whose client end
// is one of locals: an entry left from when the box last served the VIP,
// which a held connection's packets would match after the takeover.
func (lp *lossProbe) staleEntries(vip netip.Addr, locals []netip.AddrPort) (all, held int) {
	isLocal := map[string]bool{}
	for _, l := range locals {
		isLocal[l.String()] = true
	}
	for _, line := range strings.Split(lp.ct, "\n") {
		var src, dst, sport string
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			switch {
			case k == "src" && src == "":
				src = v
			case k == "dst" && dst == "":
				dst = v
			case k == "sport" && sport == "":
				sport = v
			}
		}
		if dst != vip.String() {
			continue
		}
		all++
		if isLocal[net.JoinHostPort(src, sport)] {
			held++
		}
	}
	return all, held
}

func (bp *benchPair) startLossProbe(b int) *lossProbe {
	d := bp.p.tp.Directors[b]
	lp := &lossProbe{bp: bp, b: b}
	lp.ipvs, _ = d.Exec("ipvsadm", "-Lnc")
	lp.ct, _ = d.Exec("conntrack", "-L", "-p", "tcp")
	lp.ctStats, _ = d.Exec("conntrack", "-S")
	if !bp.v.keepalived {
		for i, box := range bp.p.boxes {
			lp.logMarks[i] = len(box.proc.Output())
		}
	}
	return lp
}

// explain logs what the probe knows of each lost connection.
func (lp *lossProbe) explain(t *testing.T, lost []topo.HeldConn) {
	t.Helper()
	bp, d := lp.bp, lp.bp.p.tp.Directors[lp.b]
	ipvs, _ := d.Exec("ipvsadm", "-Lnc")
	ct, _ := d.Exec("conntrack", "-L", "-p", "tcp")
	stats, _ := d.Exec("conntrack", "-S")
	for _, c := range lost {
		port := strconv.Itoa(int(c.Local.Port()))
		ipvsMatch := func(out string) []string {
			return linesWith(out, func(f []string) bool { return len(f) >= 6 && f[3] == c.Local.String() })
		}
		ctMatch := func(out string) []string {
			return linesWith(out, func(f []string) bool {
				return slices.Contains(f, "sport="+port) || slices.Contains(f, "dport="+port)
			})
		}
		t.Logf("%s: lost %s (first answered by %s) on dir%d: IPVS before the cut %q, after %q; conntrack before %q, after %q",
			bp.v.key, c.Local, c.Server, lp.b+1, ipvsMatch(lp.ipvs), ipvsMatch(ipvs), ctMatch(lp.ct), ctMatch(ct))
		for _, rs := range bp.p.tp.RealServers {
			out, _ := rs.Exec("ss", "-tanoi")
			t.Logf("%s: lost %s: %s's sockets of it: %q", bp.v.key, c.Local, rs.Host,
				linesWith(out, func(f []string) bool { return len(f) >= 5 && f[4] == c.Local.String() }))
		}
	}
	t.Logf("%s: dir%d conntrack -S before the cut:\n%s\nafter:\n%s", bp.v.key, lp.b+1, lp.ctStats, stats)
	lp.logs(t)
}

// logs logs both lbd boxes' output since just before the cut (its first
// 60 lines each).
func (lp *lossProbe) logs(t *testing.T) {
	t.Helper()
	bp := lp.bp
	if bp.v.keepalived {
		return
	}
	for i, box := range bp.p.boxes {
		text, _ := box.proc.OutputSince(lp.logMarks[i])
		lines := strings.Split(strings.TrimSpace(text), "\n")
		if len(lines) > 60 {
			lines = lines[:60]
		}
		t.Logf("%s: dir%d's log since just before the cut:\n%s", bp.v.key, i+1, strings.Join(lines, "\n"))
	}
}

// linesWith returns the lines of out whose fields match.
func linesWith(out string, match func(fields []string) bool) []string {
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); match(f) {
			got = append(got, strings.Join(f, " "))
		}
	}
	return got
}

// firstAnswerAfter is how long after at the stream's first successful
// answer came; 0 when none did.
func firstAnswerAfter(as topo.Answers, at time.Time) time.Duration {
	var first time.Time
	for _, a := range as {
		if a.Err == "" && a.End.After(at) && (first.IsZero() || a.End.Before(first)) {
			first = a.End
		}
	}
	if first.IsZero() {
		return 0
	}
	return first.Sub(at)
}

// announcedAfter is, in the new master's lbd log since the probe began,
// how long after logged (lbd's own time for its MASTER line) its first
// gratuitous ARP was sent; 0 for keepalived or when none was logged.
func (lp *lossProbe) announcedAfter(logged time.Time) time.Duration {
	if lp.bp.v.keepalived || logged.IsZero() {
		return 0
	}
	text, _ := lp.bp.p.boxes[lp.b].proc.OutputSince(lp.logMarks[lp.b])
	for _, line := range strings.Split(text, "\n") {
		if !strings.Contains(line, `msg="sent gratuitous ARP"`) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil && !at.Before(logged) {
			return at.Sub(logged)
		}
	}
	return 0
}

// writeRounds writes every round's figures.
func writeRounds(b *strings.Builder, results []failRound) {
	b.WriteString("\nrounds (lag: the MASTER line seen after lbd's own log time for it; serve: from the MASTER line seen to the first answer; " +
		"garp: from lbd's MASTER line to its first gratuitous ARP; stale: the backup's conntrack entries to the VIP just before the cut / of them with a held connection's client end; " +
		"rst: TCP resets sent by the new master's stack / lbd's rules there / the real servers):\n")
	fmt.Fprintf(b, "%-3s %5s %4s %6s %7s %7s %7s %6s %6s %5s %9s %7s %8s %7s %8s  %s\n", "var", "round", "prio", "MD ms", "down ms", "lag ms",
		"gap ms", "gap/MD", "serve", "garp", "failed", "lost", "held ms", "stale", "rst", "failures")
	for _, r := range results {
		lag, garp := "-", "-"
		if r.logged != 0 {
			lag = ms(r.down - r.logged)
		}
		if r.announced != 0 {
			garp = ms(r.announced)
		}
		fmt.Fprintf(b, "%-3s %5d %4d %6s %7s %7s %7s %6s %6s %5s %9s %7s %8s %7s %8s  %s\n", r.variant, r.round, r.backupPrio, ms(r.downCfg), ms(r.down), lag,
			ms(r.gap), times(float64(r.gap)/float64(r.downCfg)), ms(r.serve), garp, fmt.Sprintf("%d/%d", r.failed, r.requests),
			lostMark(r), ms(r.heldLongest), fmt.Sprintf("%d/%d", r.stale, r.staleHeld),
			fmt.Sprintf("%d/%d/%d", r.resets.stack, r.resets.rejected, r.resets.servers), r.errors)
	}
}
