//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// masqPairConfig is box i's configuration for a masqueraded web service:
// pairConfig's with snat = "always", connection sync, and conntrackd
// replicating the NAT state with SNAT to the inside floating address
// (conntrackd's link and peer are the connection sync's).
func masqPairConfig(p *pair, i, prio int, conntrackd bool) string {
	cfg := strings.Replace(pairConfig(p.web, p.tp, prio, ""), `snat = "never"`, `snat = "always"`, 1) + syncConfig(p.tp, i)
	if conntrackd {
		cfg += fmt.Sprintf("\n[ha.conntrackd]\nsnat_address = [%q]\n", pairInside.Addr())
	}
	return cfg
}

// TestPairConntrack: a masqueraded service's long-lived connections
// across a box death. Their IPVS state reaches the backup by connection
// sync, their NAT state (the address and port each was SNATed to) by
// conntrackd, which the backup commits before it binds the addresses.
func TestPairConntrack(t *testing.T) {
	p := newPairTopology(t)
	p.startInOrder(t, func(i, prio int) string { return masqPairConfig(p, i, prio, true) }, p.waitRoles)
	const n = 12
	held := p.holdSynced(t, n, 1)
	inside := pairInside.Addr().String()
	// The real servers see the inside floating address, the SNAT source.
	for _, h := range held {
		if a := h.Ask(t); a.Err != "" || a.Client != pairInside.Addr() {
			t.Fatalf("a held connection's request came from %q (%s), want the inside floating address %s", a.Client, a.Err, inside)
		}
	}
	conf := filepath.Join(p.boxes[1].stateDir, "conntrackd", "conntrackd.conf")
	eventually(t, "the backup's conntrackd to hold the master's NAT entries", func() error {
		out, err := p.tp.Directors[1].Exec("conntrackd", "-C", conf, "-e")
		if err != nil {
			return fmt.Errorf("conntrackd -e: %v: %s", err, out)
		}
		// conntrackd -e shows the original direction only; the commit
		// below shows the translation.
		got := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, " ESTABLISHED ") && strings.Contains(line, " dst="+p.web.Addr().String()+" ") {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d replicated established entries to %s, want %d:\n%s", got, p.web.Addr(), n, out)
		}
		return nil
	})

	var cut time.Time
	as, gap := streamGap(t, p.client, p.web, func() {
		cut, _ = p.cutLinks(t, 0)
		p.waitMaster(t, 1, "dir2 to take over from the dead box")
	})
	at, _ := transitionAt(p.boxes[1].proc.Output(), "outside", "MASTER")
	t.Logf("FIGURE masqueraded box death: gap %dms (master-down %dms), %d of %d short requests failed (%s)",
		gap.Milliseconds(), at.Sub(cut).Milliseconds(), len(as.Errors()), len(as), errorKinds(as))
	// The commit put the entries into the new master's table, SNATed to
	// the inside address.
	if got := strings.Count(p.tp.Directors[1].MustExec(t, "conntrack", "-L", "-p", "tcp", "--dport", "80"), "dst="+inside); got < n {
		t.Errorf("the new master's conntrack table holds %d entries SNATed to %s, want at least %d", got, inside, n)
	}
	if lost := countLost(t, held, "masqueraded, after the box death"); lost > n/2 {
		t.Errorf("%d of %d masqueraded long-lived connections lost: more than half", lost, n)
	}
	if !strings.Contains(p.boxes[1].proc.Output(), "committing all external caches") {
		t.Errorf("dir2's log shows no conntrackd commit:\n%s", p.boxes[1].proc.Output())
	}
	probeOK(t, p.client, topo.HTTP, p.web, 4)
}

// TestPairMasqueradeWithoutConntrackd is TestPairConntrack's control:
// without [ha.conntrackd] each box masquerades to its own address, and
// the masqueraded connections die with the box (a figure).
func TestPairMasqueradeWithoutConntrackd(t *testing.T) {
	p := newPairTopology(t)
	p.startInOrder(t, func(i, prio int) string { return masqPairConfig(p, i, prio, false) }, p.waitRoles)
	const n = 12
	held := p.holdSynced(t, n, 1)
	p.cutLinks(t, 0)
	p.waitMaster(t, 1, "dir2 to take over from the dead box")
	lost := countLost(t, held, "masqueraded without conntrackd, after the box death")
	t.Logf("FIGURE without conntrackd: %d of %d masqueraded long-lived connections lost (their replies go to the dead box's address)", lost, n)
	probeOK(t, p.client, topo.HTTP, p.web, 4)
}
