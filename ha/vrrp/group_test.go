package vrrp

import (
	"net/netip"
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

// A member that meets a higher peer takes the others out of master with
// it; they send priority 0 so that the peer takes them at once.
func TestGroupStepsDownTogether(t *testing.T) {
	g, outside, _ := pair()
	g.Start(t0)
	mdi := g.Members()[0].MasterDownInterval()
	g.Tick(t0.Add(mdi))
	if s := states(g); s != [2]State{Master, Master} {
		t.Fatalf("%v, want both MASTER", s)
	}
	steps := g.Receive(t0.Add(mdi+time.Millisecond), 0, peer, from(outside, 200))
	if s := states(g); s != [2]State{Backup, Backup} {
		t.Fatalf("%v, want both BACKUP", s)
	}
	if len(steps) != 2 || steps[1].Member != 1 || steps[1].Transition.Cause != CauseGroup ||
		len(steps[1].Send) != 1 || steps[1].Send[0].Priority != 0 {
		t.Errorf("steps %+v, want member 1 demoted by its group with priority 0", steps)
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
	steps := g.SetFault(now, 1, true)
	if s := states(g); s != [2]State{Fault, Fault} || len(steps) != 2 {
		t.Fatalf("%v after a fault (steps %+v), want both FAULT", s, steps)
	}
	for _, st := range steps {
		if len(st.Send) != 1 || st.Send[0].Priority != 0 {
			t.Errorf("member %d sent %+v, want priority 0", st.Member, st.Send)
		}
	}
	g.SetFault(now, 0, true)
	g.SetFault(now, 1, false)
	if s := states(g); s != [2]State{Fault, Fault} {
		t.Fatalf("%v with member 0 still faulty, want both FAULT", s)
	}
	g.SetFault(now, 0, false)
	if s := states(g); s != [2]State{Backup, Backup} {
		t.Fatalf("%v after all faults cleared, want both BACKUP", s)
	}
}
