//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// Helpers of the failover tests and the failover benchmark: faults,
// waits, and what the traffic saw.

// waitFine is poll.Wait at a finer interval, for a moment to be measured.
func waitFine(limit time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// masterDown is RFC 5798's master-down interval of a backup of the given
// priority: three advert intervals and the skew time.
func masterDown(interval time.Duration, priority int) time.Duration {
	return 3*interval + time.Duration(256-priority)*interval/256
}

// cutLinks kills box i as far as the network can tell: its frontend, then
// its backend link go down. It returns when the command that took the
// frontend (the adverts' link) down started and ended.
func (p *pair) cutLinks(t *testing.T, i int) (start, end time.Time) {
	t.Helper()
	d := p.tp.Directors[i]
	start = time.Now()
	d.MustExec(t, "ip", "link", "set", p.tp.Frontend.Name, "down")
	end = time.Now()
	d.MustExec(t, "ip", "link", "set", p.tp.Backend.Name, "down")
	return start, end
}

// waitMaster waits until box i is master and holds the pair's addresses,
// whatever the other box says of itself.
func (p *pair) waitMaster(t *testing.T, i int, what string) {
	t.Helper()
	eventually(t, what, func() error {
		v, err := p.vrrpState(i)
		if err != nil {
			return err
		}
		if v.State != "MASTER" {
			return fmt.Errorf("dir%d is %s", i+1, v.State)
		}
		return p.holds(i, true)
	})
}

// established counts the director's IPVS connections in ESTABLISHED.
func established(t *testing.T, d *topo.Director) int {
	t.Helper()
	return strings.Count(d.MustExec(t, "ipvsadm", "-Lnc"), "ESTABLISHED")
}

// countLost sends a request on every held connection and returns how many
// were lost (an error, or another real server): a figure, where askAll
// fails the test on any loss.
func countLost(t *testing.T, held []*topo.Held, when string) int {
	t.Helper()
	return askHeld(t, held, when, t.Logf)
}

// askHeld asks every held connection, reports each one lost, logs the
// count as a figure and returns it.
func askHeld(t *testing.T, held []*topo.Held, when string, report func(string, ...any)) int {
	t.Helper()
	lost := 0
	for _, h := range held {
		if a := h.Ask(t); a.Err != "" || a.Server != h.Server {
			lost++
			report("%s: a held connection got %+v, want an answer from %s", when, a, h.Server)
		}
	}
	t.Logf("FIGURE %s: %d of %d long-lived connections lost", when, lost, len(held))
	return lost
}

// transitionAt returns the time of the last "VRRP transition" of instance
// to state in lbd's log (text format: time=RFC3339 with milliseconds).
func transitionAt(log, instance, to string) (time.Time, bool) {
	var at time.Time
	found := false
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, `msg="VRRP transition"`) || !strings.Contains(line, " instance="+instance+" ") ||
			!strings.Contains(line, " to="+to+" ") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if tm, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			at, found = tm, true
		}
	}
	return at, found
}

// errorKinds counts failed requests by kind: a reset is a connection the
// new master did not know, a timeout one whose packets went nowhere, "no
// route to host" an ICMP error (a routing loop ends in time exceeded).
func errorKinds(as topo.Answers) string {
	kinds := map[string]int{}
	for _, e := range as.Errors() {
		k := "other"
		for _, known := range []string{"connection reset by peer", "no route to host", "timeout"} {
			if strings.Contains(strings.ToLower(e), known) {
				k = known
				break
			}
		}
		kinds[k]++
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s: %d", k, n))
	}
	if len(parts) == 0 {
		return "none"
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// restoreLinks brings box i's links up again after cutLinks, with what
// taking them down removed: its default routes and IPv6 addresses.
func (p *pair) restoreLinks(t *testing.T, i int) {
	t.Helper()
	tp := p.tp
	d := tp.Directors[i]
	for _, seg := range []*topo.Segment{tp.Frontend, tp.Backend} {
		d.MustExec(t, "ip", "link", "set", seg.Name, "up")
		d.MustExec(t, "ip", "-6", "addr", "replace", netip.PrefixFrom(d.Addr6(seg), seg.Prefix6.Bits()).String(), "dev", seg.Name, "nodad")
	}
	d.MustExec(t, "ip", "route", "replace", "default", "via", tp.Router.Addr(tp.Frontend).String())
	d.MustExec(t, "ip", "-6", "route", "replace", "default", "via", tp.Router.Addr6(tp.Frontend).String())
}

// A failover's request stream is paced: a request every pacedEvery, each
// within pacedTimeout (under the 10 s a stream's Stop waits for those in
// flight), so that the first success after an outage comes when the
// service is back, to within pacedEvery, not when one stuck request's
// SYN happens to be sent again (1 s, then 3 s, after the first).
const (
	pacedEvery   = 20 * time.Millisecond
	pacedTimeout = 5 * time.Second
)

// streamGap runs fault under a paced stream of short requests to target
// and returns its answers and the client-visible gap: the longest time
// between two successive successful answers. The stream runs until ten
// requests sent after fault returned have succeeded.
func streamGap(t *testing.T, client *topo.Node, target netip.AddrPort, fault func()) (topo.Answers, time.Duration) {
	t.Helper()
	s := client.StartPacedStream(t, topo.HTTP, target, pacedTimeout, pacedEvery)
	s.WaitAnswers(t, 10, settleLimit)
	fault()
	waitSuccessesAfter(t, s, time.Now(), 10)
	as := s.Stop(t)
	gap, from, _ := longestGap(as)
	t.Logf("request stream through %s: %s; longest gap %dms, from a success at %s",
		target, as.Summary(), gap.Milliseconds(), from.Format("15:04:05.000"))
	return as, gap
}

// waitSuccessesAfter waits until n requests of a paced stream sent after
// since have succeeded.
func waitSuccessesAfter(t *testing.T, s *topo.Stream, since time.Time, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d successful requests sent after %s", n, since.Format("15:04:05.000")), func() error {
		as, err := s.Answers()
		if err != nil {
			return err
		}
		got := 0
		for _, a := range as {
			if a.Err == "" && a.Start.After(since) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d so far (%s)", got, as.Summary())
		}
		return nil
	})
}

// longestGap is the longest time between two successive successful
// answers of a paced stream (by when they were answered), and when it
// began and ended.
func longestGap(as topo.Answers) (gap time.Duration, from, to time.Time) {
	var ends []time.Time
	for _, a := range as {
		if a.Err == "" {
			ends = append(ends, a.End)
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ends); i++ {
		if d := ends[i].Sub(ends[i-1]); d > gap {
			gap, from, to = d, ends[i-1], ends[i]
		}
	}
	return gap, from, to
}

// heldEvery is how often a failover test's client-first long-lived
// connections send a request by themselves.
const heldEvery = 100 * time.Millisecond

// heldSet is a failover test's long-lived connections, of both kinds:
// client-first ones that send a request every heldEvery, and server-first
// ones to the pair's push service, whose real server sends a line every
// topo.PushEvery and the client only reads.
type heldSet struct {
	client, push *topo.Holds // nil when none of the kind
}

// pushTarget is the pair's server-first service: the web VIP on the
// backends' push port.
func (p *pair) pushTarget() netip.AddrPort {
	return netip.AddrPortFrom(p.web.Addr(), topo.BackendPushPort)
}

// holdMixed opens clientFirst and push long-lived connections through the
// pair's master and waits until box backup's kernel knows every one of
// them (IPVS connection sync).
func (p *pair) holdMixed(t *testing.T, clientFirst, push, backup int) heldSet {
	t.Helper()
	hs := p.openHeld(t, clientFirst, push)
	eventually(t, fmt.Sprintf("the held connections to reach dir%d", backup+1), func() error { return p.synced(backup, hs.locals()) })
	return hs
}

// openHeld opens clientFirst and push long-lived connections through the
// pair's master.
func (p *pair) openHeld(t *testing.T, clientFirst, push int) heldSet {
	t.Helper()
	var hs heldSet
	if clientFirst > 0 {
		hs.client = p.client.HoldMany(t, p.web, topo.HoldOptions{Count: clientFirst, Every: heldEvery})
	}
	if push > 0 {
		hs.push = p.client.HoldMany(t, p.pushTarget(), topo.HoldOptions{Count: push, Push: true})
	}
	return hs
}

// waitSynced waits until box i's IPVS lists every one of the client ends
// as an established connection.
func (p *pair) waitSynced(t *testing.T, i int, locals []netip.AddrPort) {
	t.Helper()
	eventually(t, fmt.Sprintf("the held connections to reach dir%d", i+1), func() error { return p.synced(i, locals) })
}

// synced is nil when box i's IPVS lists every one of the client ends as
// an established connection; its error's first line says how many it
// lacks, the rest is ipvsadm -Lnc.
func (p *pair) synced(i int, locals []netip.AddrPort) error {
	out, err := p.tp.Directors[i].Exec("ipvsadm", "-Lnc")
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[2] == "ESTABLISHED" {
			known[f[3]] = true
		}
	}
	missing := 0
	for _, l := range locals {
		if !known[l.String()] {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d held connections not established on dir%d:\n%s", missing, len(locals), i+1, out)
	}
	return nil
}

type heldKind struct {
	name  string
	holds *topo.Holds
}

// locals is the client ends of every held connection.
func (hs heldSet) locals() []netip.AddrPort {
	var ls []netip.AddrPort
	for _, k := range hs.kinds() {
		for _, c := range k.holds.Conns {
			ls = append(ls, c.Local)
		}
	}
	return ls
}

func (hs heldSet) kinds() []heldKind {
	var ks []heldKind
	if hs.client != nil {
		ks = append(ks, heldKind{"client-first", hs.client})
	}
	if hs.push != nil {
		ks = append(ks, heldKind{"server-first", hs.push})
	}
	return ks
}

// heldOutcome is what became of a heldSet's connections.
type heldOutcome struct {
	lostClient, lostPush int
	lost                 []topo.HeldConn // the lost connections, both kinds
	// longest is the longest a connection that was not lost went between
	// two exchanges.
	longest time.Duration
}

// ask has every held connection exchange once more, logs each lost one
// and, as figures, how many of each kind were lost and the longest
// gaps; the caller decides what a loss means.
func (hs heldSet) ask(t *testing.T, when string) heldOutcome {
	t.Helper()
	var o heldOutcome
	for _, k := range hs.kinds() {
		lost := 0
		var longest []time.Duration
		for i, x := range k.holds.Ask(t) {
			c := k.holds.Conns[i]
			if x.Lost(c) {
				lost++
				o.lost = append(o.lost, c)
				failed := ""
				if !x.FailedAt.IsZero() {
					failed = " (failed at " + x.FailedAt.Format("15:04:05.000") + ")"
				}
				t.Logf("%s: a %s connection from %s got server %q, error %q%s; first answered by %s",
					when, k.name, c.Local, x.Server, x.Err, failed, c.Server)
				continue
			}
			longest = append(longest, x.Longest)
		}
		if k.holds == hs.push {
			o.lostPush = lost
		} else {
			o.lostClient = lost
		}
		slices.Sort(longest)
		worst, mid := time.Duration(0), time.Duration(0)
		if len(longest) > 0 {
			worst, mid = longest[len(longest)-1], longest[len(longest)/2]
			o.longest = max(o.longest, worst)
		}
		t.Logf("FIGURE %s: %d of %d %s long-lived connections lost; the others' longest gap: median %dms, worst %dms",
			when, lost, len(k.holds.Conns), k.name, mid.Milliseconds(), worst.Milliseconds())
	}
	return o
}

// reset closes every held connection.
func (hs heldSet) reset() {
	for _, k := range hs.kinds() {
		k.holds.Reset()
	}
}
