package vrrp

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func pair() (*Group, Params, Params) {
	outside := params()
	inside := params(func(p *Params) {
		p.VRID = 52
		p.Self = netip.MustParseAddr("198.18.3.2")
		p.Addrs = []netip.Addr{netip.MustParseAddr("198.18.3.1")}
	})
	return NewGroup("pair", NewMachine(outside), NewMachine(inside)), outside, inside
}

func states(g *Group) [2]State {
	return [2]State{g.Members()[0].State(), g.Members()[1].State()}
}

// The members' timers run out at different times (their last adverts
// came at different times): the first to run out waits for the other,
// and then both become master together, with no timer reset in between
// that would keep them from ever agreeing.
func TestGroupTakesOverTogether(t *testing.T) {
	g, outside, inside := pair()
	g.Start(t0)
	mdi := g.Members()[0].MasterDownInterval()
	g.Receive(t0.Add(10*time.Millisecond), 0, peer, from(outside, 150))
	g.Receive(t0.Add(60*time.Millisecond), 1, netip.MustParseAddr("198.18.3.3"), from(inside, 150))

	first := t0.Add(10*time.Millisecond + mdi)
	if d := g.Deadline(); !d.Equal(first) {
		t.Fatalf("deadline %v, want %v", d, first)
	}
	g.Tick(first)
	if s := states(g); s != [2]State{Backup, Backup} {
		t.Fatalf("after the first timer: %v, want both BACKUP (the first held)", s)
	}
	second := t0.Add(60*time.Millisecond + mdi)
	if d := g.Deadline(); !d.Equal(second) {
		t.Fatalf("deadline %v, want the second member's %v (the held one has no timer)", d, second)
	}
	steps := g.Tick(second)
	if s := states(g); s != [2]State{Master, Master} {
		t.Fatalf("after the second timer: %v, want both MASTER", s)
	}
	if len(steps) != 2 || len(steps[0].Send) != 1 || len(steps[1].Send) != 1 {
		t.Errorf("steps %+v, want one advert from each member", steps)
	}
}

// While the peer still advertises for one member, the other member's run
// out timer does not make this box take half the group.
func TestGroupHalfHeardStaysBackup(t *testing.T) {
	g, _, inside := pair()
	g.Start(t0)
	mdi := g.Members()[0].MasterDownInterval()
	for at := time.Duration(0); at < 5*mdi; at += 100 * time.Millisecond {
		now := t0.Add(at)
		g.Receive(now, 1, netip.MustParseAddr("198.18.3.3"), from(inside, 150))
		g.Tick(now)
		if s := states(g); s != [2]State{Backup, Backup} {
			t.Fatalf("at %v: %v, want both BACKUP", at, s)
		}
	}
}

// gev is one step of a group scenario: at offset at (after both members
// became master), a tick, an advert at prio from member's peer, a fault
// of member, or a stop; want is the steps it yields (see render) and
// states the members' states after it.
type gev struct {
	at     time.Duration
	kind   string // "tick", "advert", "fault", "soft fault", "clear", "stop"
	member int
	prio   uint8
	want   string
	states string
}

var peers = [2]netip.Addr{peer, netip.MustParseAddr("198.18.3.3")}

// render writes steps as "member: what; ...": the priorities sent, a
// transition held back (hold), reported (report) or dropped (kept), and a
// re-announcement.
func render(steps []Step) string {
	short := map[Cause]string{CauseHigherPeer: "higher", CauseGroup: "group", CauseMasterDown: "down",
		CauseFault: "fault", CauseStop: "stop", CauseTracked: "tracked", CauseFaultCleared: "cleared"}
	tr := func(t Transition) string { return fmt.Sprintf("%v->%v(%s)", t.From, t.To, short[t.Cause]) }
	var parts []string
	for _, st := range steps {
		p := fmt.Sprint(st.Member)
		for _, a := range st.Send {
			p += fmt.Sprintf(" send %d", a.Priority)
		}
		if st.Holding != nil {
			p += " hold " + tr(*st.Holding)
		}
		if st.Transition != nil {
			p += " report " + tr(*st.Transition)
		}
		if st.Kept != nil {
			p += " kept " + tr(*st.Kept)
		}
		if st.Announce {
			p += " announce"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// Leaving master for a better master is make-before-break, for the group
// as a whole: both members hold their addresses until each has heard its
// new master twice (the advert that made it step down counts), or until
// the bound; then both report BACKUP and send priority 0.
func TestGroupLeavesMaster(t *testing.T) {
	g0, outside, _ := pair()
	mdi := g0.Members()[0].MasterDownInterval()
	bound := mdi + outside.Interval
	const (
		held     = "0 hold MASTER->BACKUP(higher); 1 send 0 hold MASTER->BACKUP(group)"
		released = "0 send 0 report MASTER->BACKUP(higher); 1 send 0 report MASTER->BACKUP(group)"
		// A soft fault leaves master as a preemption does.
		softHeld     = "0 send 0 hold MASTER->FAULT(tracked); 1 send 0 hold MASTER->FAULT(tracked)"
		softReleased = "0 send 0 report MASTER->FAULT(tracked); 1 send 0 report MASTER->FAULT(tracked)"
		softCleared  = "0 hold FAULT->BACKUP(cleared); 1 hold FAULT->BACKUP(cleared)"
	)
	for _, tc := range []struct {
		name   string
		events []gev
	}{
		{"preempted: released when both new masters advertised twice", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 2 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 101 * time.Millisecond, kind: "advert", member: 0, prio: 200, states: "BACKUP BACKUP"},
			{at: 102 * time.Millisecond, kind: "advert", member: 1, prio: 200, want: released, states: "BACKUP BACKUP"},
			{at: 202 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
		}},
		{"the new master goes silent: master again, the addresses never left", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 1*time.Millisecond + mdi, kind: "tick", states: "MASTER MASTER",
				want: "0 send 100 kept BACKUP->MASTER(down) announce; 1 send 100 kept BACKUP->MASTER(down) announce"},
			{at: 1*time.Millisecond + mdi + outside.Interval, kind: "tick", want: "0 send 100; 1 send 100", states: "MASTER MASTER"},
		}},
		// The peer's outside adverts are lost: the outside member is held
		// by its group (the inside one hears its master), and the bound
		// releases both.
		{"one new master unheard: released at the bound", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 10 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 110 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 210 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 310 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 1*time.Millisecond + mdi, kind: "tick", states: "BACKUP BACKUP"},
			{at: 410 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "BACKUP BACKUP"},
			{at: 1*time.Millisecond + bound, kind: "tick", want: released, states: "BACKUP BACKUP"},
		}},
		{"a fault while leaving gives everything up at once", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 2 * time.Millisecond, kind: "fault", member: 1, states: "FAULT FAULT",
				want: released + "; 0 report BACKUP->FAULT(fault); 1 report BACKUP->FAULT(fault)"},
		}},
		{"a soft fault: the addresses held until the peer advertised twice", []gev{
			{at: 1 * time.Millisecond, kind: "soft fault", member: 1, want: softHeld, states: "FAULT FAULT"},
			{at: 100 * time.Millisecond, kind: "advert", member: 0, prio: 150, states: "FAULT FAULT"},
			{at: 101 * time.Millisecond, kind: "advert", member: 1, prio: 150, states: "FAULT FAULT"},
			{at: 200 * time.Millisecond, kind: "advert", member: 0, prio: 150, states: "FAULT FAULT"},
			{at: 201 * time.Millisecond, kind: "advert", member: 1, prio: 150, want: softReleased, states: "FAULT FAULT"},
		}},
		{"a hard fault while a soft one holds gives everything up at once", []gev{
			{at: 1 * time.Millisecond, kind: "soft fault", member: 1, want: softHeld, states: "FAULT FAULT"},
			{at: 2 * time.Millisecond, kind: "fault", member: 0, want: softReleased, states: "FAULT FAULT"},
		}},
		{"a soft fault cleared before the peer took over: the addresses never left", []gev{
			{at: 1 * time.Millisecond, kind: "soft fault", member: 1, want: softHeld, states: "FAULT FAULT"},
			{at: 2 * time.Millisecond, kind: "clear", member: 1, want: softCleared, states: "BACKUP BACKUP"},
			{at: 2*time.Millisecond + mdi, kind: "tick", states: "MASTER MASTER",
				want: "0 send 100 kept BACKUP->MASTER(down) announce; 1 send 100 kept BACKUP->MASTER(down) announce"},
		}},
		{"a soft fault cleared after the peer took over: released as backups", []gev{
			{at: 1 * time.Millisecond, kind: "soft fault", member: 1, want: softHeld, states: "FAULT FAULT"},
			{at: 100 * time.Millisecond, kind: "advert", member: 0, prio: 150, states: "FAULT FAULT"},
			{at: 101 * time.Millisecond, kind: "advert", member: 1, prio: 150, states: "FAULT FAULT"},
			{at: 150 * time.Millisecond, kind: "clear", member: 1, want: softCleared, states: "BACKUP BACKUP"},
			{at: 200 * time.Millisecond, kind: "advert", member: 0, prio: 150, states: "BACKUP BACKUP"},
			{at: 201 * time.Millisecond, kind: "advert", member: 1, prio: 150, states: "BACKUP BACKUP",
				want: "0 send 0 report MASTER->BACKUP(cleared); 1 send 0 report MASTER->BACKUP(cleared)"},
		}},
		{"a soft fault while leaving for a better master: released at its adverts", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 2 * time.Millisecond, kind: "soft fault", member: 1, states: "FAULT FAULT",
				want: "0 hold BACKUP->FAULT(tracked); 1 hold BACKUP->FAULT(tracked)"},
			{at: 3 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "FAULT FAULT"},
			{at: 101 * time.Millisecond, kind: "advert", member: 0, prio: 200, states: "FAULT FAULT"},
			{at: 102 * time.Millisecond, kind: "advert", member: 1, prio: 200, states: "FAULT FAULT",
				want: "0 send 0 report MASTER->FAULT(tracked); 1 send 0 report MASTER->FAULT(tracked)"},
		}},
		{"a stop while leaving releases first", []gev{
			{at: 1 * time.Millisecond, kind: "advert", member: 0, prio: 200, want: held, states: "BACKUP BACKUP"},
			{at: 2 * time.Millisecond, kind: "stop", states: "INIT INIT",
				want: released + "; 0 report BACKUP->INIT(stop); 1 report BACKUP->INIT(stop)"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, outside, inside := pair()
			g.Start(t0)
			g.Tick(t0.Add(mdi))
			if s := states(g); s != [2]State{Master, Master} {
				t.Fatalf("%v, want both MASTER", s)
			}
			base := t0.Add(mdi)
			for i, e := range tc.events {
				now := base.Add(e.at)
				var steps []Step
				switch e.kind {
				case "tick":
					if d := g.Deadline(); d.IsZero() || now.Before(d) {
						t.Fatalf("event %d: tick at %v before the deadline %v", i, now, d)
					}
					steps = g.Tick(now)
				case "advert":
					steps = g.Receive(now, e.member, peers[e.member], from([]Params{outside, inside}[e.member], e.prio))
				case "fault":
					steps = g.SetFault(now, e.member, HardFault)
				case "soft fault":
					steps = g.SetFault(now, e.member, SoftFault)
				case "clear":
					steps = g.SetFault(now, e.member, NoFault)
				case "stop":
					steps = g.Stop()
				}
				if got := render(steps); got != e.want {
					t.Errorf("event %d (%s at %v): steps %q, want %q", i, e.kind, e.at, got, e.want)
				}
				if s := states(g); fmt.Sprint(s[0], " ", s[1]) != e.states {
					t.Fatalf("event %d (%s at %v): states %v, want %s", i, e.kind, e.at, s, e.states)
				}
			}
		})
	}
}

// One member's fault is the group's: both leave master, and come back as
// backups only when every member's fault is cleared.
func TestGroupFault(t *testing.T) {
	g, _, _ := pair()
	g.Start(t0)
	mdi := g.Members()[0].MasterDownInterval()
	g.Tick(t0.Add(mdi))
	now := t0.Add(mdi + time.Millisecond)
	steps := g.SetFault(now, 1, HardFault)
	if s := states(g); s != [2]State{Fault, Fault} || len(steps) != 2 {
		t.Fatalf("%v after a fault (steps %+v), want both FAULT", s, steps)
	}
	for _, st := range steps {
		if len(st.Send) != 1 || st.Send[0].Priority != 0 {
			t.Errorf("member %d sent %+v, want priority 0", st.Member, st.Send)
		}
	}
	g.SetFault(now, 0, HardFault)
	g.SetFault(now, 1, NoFault)
	if s := states(g); s != [2]State{Fault, Fault} {
		t.Fatalf("%v with member 0 still faulty, want both FAULT", s)
	}
	g.SetFault(now, 0, NoFault)
	if s := states(g); s != [2]State{Backup, Backup} {
		t.Fatalf("%v after all faults cleared, want both BACKUP", s)
	}
}
