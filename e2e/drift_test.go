//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// driftLog is the line the daemon logs for each drift the kernel tells
// about (dataplane/drift), before it asks for a repair.
const driftLog = `msg="dataplane drift; repairing"`

// repairLimit bounds the wait for a repair the kernel's notifications
// trigger. It is a functional bound, not a performance one: the periodic
// sync that would otherwise repair comes only after sync_period (30 s).
const repairLimit = 5 * time.Second

// driftConfig is the configuration of TestDrift: a service, a firewalled
// one admitting only client, and with extra a third VIP; a weight that
// edits change.
func driftConfig(tp *topo.Topology, client netip.Addr, syncPeriod string, weight int, extra bool) string {
	rs := tp.RealServers[0].Addr(tp.Backend)
	service := func(name string, n int, more string) string {
		return fmt.Sprintf("\n[[service]]\nname = %q\nvips = [%q]\nport = 80\nscheduler = \"rr\"\nhealth_check = { type = \"none\" }\n%s\nreal_server = [{ address = \"%s\", weight = %d }]\n",
			name, topo.VIP(n), more, rs, weight)
	}
	cfg := fmt.Sprintf("[sync]\nmin_sync_period = \"100ms\"\nsync_period = %q\n", syncPeriod) +
		service("web", 1, "") + service("fw", 2, fmt.Sprintf("source_ranges = [\"%s/32\"]", client))
	if extra {
		cfg += service("extra", 3, "")
	}
	return cfg
}

// TestDrift proves that the drift the kernel tells about is repaired at
// once, well before sync_period: a VIP deleted from lbd0, lbd's iptables
// chain flushed (iptables-nft); that lbd's own writes are not taken for
// drift; and that a flushed ipset, which the kernel does not tell about,
// waits for the periodic sync, as docs/architecture.md says.
func TestDrift(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Clients: 2, RealServers: 1})
	tp.StartBackends(t)
	e := &driftEnv{tp: tp, dir: tp.Directors[0], c1: tp.ClientHosts[0], c2: tp.ClientHosts[1]}
	e.l = startLBD(t, e.dir, driftConfig(tp, e.c1.Addr(tp.Clients), "30s", 1, false))
	waitServes(t, e.c1, topo.HTTP, netip.AddrPortFrom(topo.VIP(1), 80))
	waitServes(t, e.c1, topo.HTTP, netip.AddrPortFrom(topo.VIP(2), 80))
	e.l.waitLog(t, "the first sync's log", `msg="sync applied"`)
	t.Run("a deleted VIP is back at once", e.deletedVIP)
	t.Run("a flushed chain is back at once and drops outsiders again", e.flushedChain)
	t.Run("lbd's own writes are not drift", e.ownWrites)
	t.Run("a flushed ipset waits for the periodic sync", e.flushedSet)
}

// driftEnv is TestDrift's topology and lbd, shared by its subtests.
type driftEnv struct {
	tp     *topo.Topology
	dir    *topo.Director
	c1, c2 *topo.Node // c1 is in the firewalled service's source_ranges
	l      *lbd
}

func (e *driftEnv) deletedVIP(t *testing.T) {
	mark, start := len(e.l.proc.Output()), time.Now()
	vip := topo.VIP(1).String() + "/32"
	e.dir.MustExec(t, "ip", "addr", "del", vip, "dev", topo.VIPLink)
	poll.Until(t, "the VIP back on lbd0", repairLimit, func() error {
		if got := vipsOn(t, e.dir); !slices.Contains(got, vip) {
			return fmt.Errorf("lbd0 holds %v", got)
		}
		return nil
	})
	logRepair(t, e.l, mark, start, "VIP "+topo.VIP(1).String()+" removed from lbd0")
	waitServes(t, e.c1, topo.HTTP, netip.AddrPortFrom(topo.VIP(1), 80))
	checkNextDrift(t, e.l, e.dir, mark, 1)
}

func (e *driftEnv) flushedChain(t *testing.T) {
	fw := netip.AddrPortFrom(topo.VIP(2), 80)
	before := e.dir.MustExec(t, "iptables-save", "-t", "filter")
	mark, start := len(e.l.proc.Output()), time.Now()
	e.dir.MustExec(t, "iptables", "-F", "LBD-INPUT")
	poll.Until(t, "LBD-INPUT back", repairLimit, func() error {
		if got := e.dir.MustExec(t, "iptables-save", "-t", "filter"); lbdLines(got, "LBD") != lbdLines(before, "LBD") {
			return fmt.Errorf("filter:\n%s", got)
		}
		return nil
	})
	logRepair(t, e.l, mark, start, "ip filter LBD-INPUT: rule deleted")
	answers, err := e.c2.Probe(topo.HTTP, fw, 1, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if errs := answers.Errors(); len(errs) != 1 || strings.Contains(errs[0], "refused") {
		t.Errorf("a client outside source_ranges got %+v after the repair; want a dropped request", answers)
	}
	probeOK(t, e.c1, topo.HTTP, fw, 1)
	// The repair rewrote LBD-INPUT with lbd's own iptables-restore.
	checkNextDrift(t, e.l, e.dir, mark, 1)
}

func (e *driftEnv) ownWrites(t *testing.T) {
	mark := len(e.l.proc.Output())
	const edits = 20
	for i := range edits {
		extra := i%2 == 0
		e.l.writeConfig(t, driftConfig(e.tp, e.c1.Addr(e.tp.Clients), "30s", 1+i%5, extra))
		eventually(t, fmt.Sprintf("edit %d applied", i), func() error {
			if got := slices.Contains(vipsOn(t, e.dir), topo.VIP(3).String()+"/32"); got != extra {
				return fmt.Errorf("VIP 3 on lbd0: %v, want %v", got, extra)
			}
			return nil
		})
	}
	log := sinceLog(e.l.proc, mark)
	t.Logf("%d configuration edits (VIP 3 bound and unbound in turn): %d syncs, %d drift reports, %d drift syncs",
		edits, strings.Count(log, `msg="sync applied"`), strings.Count(log, driftLog), strings.Count(log, "reason=drift"))
	checkNextDrift(t, e.l, e.dir, mark, 0)
}

func (e *driftEnv) flushedSet(t *testing.T) {
	e.l.writeConfig(t, driftConfig(e.tp, e.c1.Addr(e.tp.Clients), "3s", 1, false))
	e.l.kill(t) // sync_period is read at start
	// Whatever its reason (a sync skipped while the configuration loads may
	// take "initial"), the first sync that ran has a count of dumps.
	e.l.waitLog(t, "the first sync after the restart", `dumps=`)
	want := e.dir.MustExec(t, "ipset", "list", "LBD-SERVICES")
	mark, start := len(e.l.proc.Output()), time.Now()
	e.dir.MustExec(t, "ipset", "flush", "LBD-SERVICES")
	eventually(t, "LBD-SERVICES repaired", func() error {
		if got := e.dir.MustExec(t, "ipset", "list", "LBD-SERVICES"); lbdLines(got, ",tcp:") != lbdLines(want, ",tcp:") {
			return fmt.Errorf("LBD-SERVICES:\n%s", got)
		}
		return nil
	})
	// The set is written before the sync ends and logs.
	var log, line string
	var at time.Time
	eventually(t, "the repairing sync's log", func() error {
		log = sinceLog(e.l.proc, mark)
		if line, at = firstLine(log, `msg="sync applied"`); line == "" {
			return fmt.Errorf("no sync applied since the flush:\n%s", log)
		}
		return nil
	})
	if !strings.Contains(line, "reason=periodic") || strings.Contains(log, driftLog) {
		t.Errorf("the flushed set was repaired by %q; want a periodic sync and no drift report:\n%s", line, log)
	}
	t.Logf("ipset flush repaired by the periodic sync %v after the flush (sync_period 3s)", at.Sub(start).Round(time.Millisecond))
}

// logRepair finds, in lbd's log after mark, the drift report naming what
// and the drift sync that repaired it, and logs how long each took after
// start (when the test changed the kernel).
func logRepair(t *testing.T, l *lbd, mark int, start time.Time, what string) {
	t.Helper()
	var seenLine, syncLine string
	var seen, synced time.Time
	eventually(t, "the drift report and its sync in lbd's log", func() error {
		log := sinceLog(l.proc, mark)
		seenLine, seen = firstLine(log, driftLog)
		syncLine, synced = firstLine(log, "reason=drift")
		if seenLine == "" || syncLine == "" {
			return fmt.Errorf("no drift report or drift sync in:\n%s", log)
		}
		return nil
	})
	if !strings.Contains(seenLine, what) {
		t.Errorf("drift report %q; want it to say %q", seenLine, what)
	}
	t.Logf("%s: drift seen %v after the change, repaired %v after it (%v after the report): %s",
		what, seen.Sub(start).Round(time.Millisecond), synced.Sub(start).Round(time.Millisecond), synced.Sub(seen).Round(time.Millisecond), syncLine)
}

// checkNextDrift adds an address lbd does not bind to lbd0 and checks
// that lbd's drift reports since mark are the before reports the test
// caused, each alone, then the marker's: lbd's own writes in between
// (repairs, edits) were not taken for drift, since the kernel tells
// everything in order. lbd removes the address again.
func checkNextDrift(t *testing.T, l *lbd, dir *topo.Director, mark, before int) {
	t.Helper()
	dir.MustExec(t, "ip", "addr", "add", "192.0.2.77/32", "dev", topo.VIPLink)
	var reports []string
	eventually(t, "the marker's drift report", func() error {
		reports = nil
		for _, line := range strings.Split(sinceLog(l.proc, mark), "\n") {
			if strings.Contains(line, driftLog) {
				reports = append(reports, line)
			}
		}
		if len(reports) <= before {
			return fmt.Errorf("%d drift reports, want %d", len(reports), before+1)
		}
		return nil
	})
	for i, r := range reports {
		if strings.Contains(r, "; and ") || (i == before) != strings.Contains(r, "192.0.2.77 added to lbd0") {
			t.Errorf("drift reports:\n%s\nwant %d of the test's, then the marker 192.0.2.77 (lbd's own writes are not drift)", strings.Join(reports, "\n"), before)
			break
		}
	}
	poll.Until(t, "the marker removed", repairLimit, func() error {
		if slices.Contains(vipsOn(t, dir), "192.0.2.77/32") {
			return fmt.Errorf("192.0.2.77 still on lbd0")
		}
		return nil
	})
	// The repair's sync has logged, so that what follows counts only its own.
	eventually(t, "the marker's repair logged", func() error {
		_, after, _ := strings.Cut(sinceLog(l.proc, mark), "192.0.2.77 added to lbd0")
		if !strings.Contains(after, "reason=drift") {
			return fmt.Errorf("no drift sync after the marker's report")
		}
		return nil
	})
}

// firstLine returns the first line of log containing s, and the time lbd
// logged it (zero when unreadable).
func firstLine(log, s string) (string, time.Time) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, s) {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		at, _ := time.Parse(time.RFC3339Nano, stamp)
		return line, at
	}
	return "", time.Time{}
}
