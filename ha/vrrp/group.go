package vrrp

import (
	"net/netip"
	"slices"
	"time"
)

// Group is instances that fail over together (keepalived's
// vrrp_sync_group): a box holds all of them or none, so that the VIPs
// and the inside address real servers route through never sit on
// different boxes. An instance outside any group is a group of one.
//
//   - A member becomes master only when every other member is master or
//     ready to become one (its master-down timer ran out); then all the
//     ready members become master together.
//   - A member that leaves master demotes the others (they send priority
//     0, so the peer takes them over at once).
//   - A fault of any member is the fault of all, until every member's is
//     cleared. A hard one (a tracked interface down) gives the addresses
//     up at once; a soft one (a tracked check) as a preemption does.
//   - Leaving master because a better master is heard (a preemption, a
//     healed partition) is make-before-break: the members are backups at
//     once in VRRP terms (they send no adverts), but they keep their
//     addresses until the new master has advertised twice — its first
//     advert goes out as it becomes master, before its addresses are
//     bound; by the second they are — or until a bound passes. Then all
//     release together, and each sends priority 0 so that the new master
//     announces the addresses again (see Machine.Receive). A soft fault
//     leaves master the same way: the members enter FAULT sending
//     priority 0, so the peer takes over after its skew time, and keep
//     the addresses until it has advertised twice.
type Group struct {
	Name    string // "" for an instance outside any group
	members []*Machine
	faults  []FaultKind // by member
	leaves  []*leave    // by member: nil unless leaving master
	// leaveBy bounds the leaving (zero when no member leaves).
	leaveBy time.Time
}

// leave is a member leaving master, make-before-break.
type leave struct {
	t       Transition // out of master: reported at the release
	adverts int        // the new master's adverts still to hear
}

// Step is one member's output. A transition out of master because of a
// better master comes twice: first as Holding (a backup in VRRP terms that
// keeps its addresses), then, at the release, as Output.Transition, with a
// priority-0 advert. If the member becomes master again before the
// release, that comes as Kept: the addresses never left, there is nothing
// to report, and they are announced again (Announce).
type Step struct {
	Member int
	Output
	Holding *Transition
	Kept    *Transition
}

// NewGroup returns a group of machines, in Init.
func NewGroup(name string, members ...*Machine) *Group {
	return &Group{Name: name, members: members, faults: make([]FaultKind, len(members)), leaves: make([]*leave, len(members))}
}

// Members returns the group's machines.
func (g *Group) Members() []*Machine { return g.members }

// Start starts every member as backup (or fault).
func (g *Group) Start(now time.Time) []Step {
	var steps []Step
	for i, m := range g.members {
		steps = appendStep(steps, i, m.Start(now))
	}
	if k := g.fault(); k != NoFault {
		steps = append(steps, g.setFault(now, k)...)
	}
	return steps
}

// Deadline is the earliest member deadline, or the leaving's bound; zero
// when none runs.
func (g *Group) Deadline() time.Time {
	d := g.leaveBy
	for _, m := range g.members {
		if t := m.Deadline(); !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

// Tick runs the members' timers due at now.
func (g *Group) Tick(now time.Time) []Step {
	ready := true
	for _, m := range g.members {
		ready = ready && (m.State() == Master || m.MasterDue(now))
	}
	var steps []Step
	for i, m := range g.members {
		out := m.Tick(now, ready)
		if t := out.Transition; t != nil && t.To == Master && g.leaves[i] != nil {
			// Master again before the release (the new master went
			// silent): the addresses never left.
			g.leaves[i] = nil
			steps = append(steps, Step{Member: i, Output: Output{Send: out.Send, Announce: true}, Kept: t})
			continue
		}
		steps = appendStep(steps, i, out)
	}
	if !g.leaving() {
		g.leaveBy = time.Time{}
	} else if !now.Before(g.leaveBy) {
		steps = append(steps, g.release()...)
	}
	return steps
}

// Receive hands member i an advert from src (already checked), and
// applies the group's rule to what follows.
func (g *Group) Receive(now time.Time, i int, src netip.Addr, a Advert) []Step {
	out := g.members[i].Receive(now, src, a)
	if l := g.leaves[i]; l != nil && a.Priority > 0 && l.adverts > 0 {
		l.adverts--
	}
	steps := appendStep(nil, i, out)
	if t := out.Transition; t != nil && t.From == Master {
		steps = append(steps, g.demoteOthers(now, i)...)
		return g.hold(now, i, steps)
	}
	if g.leaving() && g.heard() {
		steps = append(steps, g.release()...)
	}
	return steps
}

// hold turns the steps out of master into Holding ones: member i heard
// the better master (that advert was its first), the others were demoted
// with it and sent priority 0 (the new master's two adverts are to come);
// i is -1 when no advert made them leave (a soft fault).
func (g *Group) hold(now time.Time, i int, steps []Step) []Step {
	for k, st := range steps {
		t := st.Transition
		if t == nil || t.From != Master {
			continue
		}
		l := &leave{t: *t, adverts: 2}
		if st.Member == i {
			l.adverts = 1
		}
		g.leaves[st.Member] = l
		steps[k].Holding, steps[k].Transition = t, nil
		m := g.members[st.Member]
		// As a planned stop waits (Runner.handOver).
		if by := now.Add(m.MasterDownInterval() + m.Params().Interval); by.After(g.leaveBy) {
			g.leaveBy = by
		}
	}
	return steps
}

// Leaving reports whether member i left master but keeps its addresses,
// and how many of the new master's adverts it still waits for.
func (g *Group) Leaving(i int) (adverts int, ok bool) {
	if l := g.leaves[i]; l != nil {
		return l.adverts, true
	}
	return 0, false
}

func (g *Group) leaving() bool {
	return slices.ContainsFunc(g.leaves, func(l *leave) bool { return l != nil })
}

// heard reports whether every leaving member heard its new master enough.
func (g *Group) heard() bool {
	return !slices.ContainsFunc(g.leaves, func(l *leave) bool { return l != nil && l.adverts > 0 })
}

// release ends the leaving: every leaving member reports its transition
// and sends priority 0, so that the new master announces the addresses
// again (neighbours may have learned this box meanwhile).
func (g *Group) release() []Step {
	var steps []Step
	for i, l := range g.leaves {
		if l == nil {
			continue
		}
		t := l.t
		steps = append(steps, Step{Member: i, Output: Output{Send: []Advert{g.members[i].advert(0)}, Transition: &t}})
		g.leaves[i] = nil
	}
	g.leaveBy = time.Time{}
	return steps
}

func (g *Group) demoteOthers(now time.Time, except int) []Step {
	var steps []Step
	for j, m := range g.members {
		if j != except {
			steps = appendStep(steps, j, m.Demote(now))
		}
	}
	return steps
}

// SetFault records how member i is faulty (NoFault when it is not).
func (g *Group) SetFault(now time.Time, i int, k FaultKind) []Step {
	was := g.fault()
	g.faults[i] = k
	is := g.fault()
	switch {
	case is == was:
		return nil
	case is == HardFault && was == SoftFault:
		// In FAULT already: what a soft fault still held goes now.
		return g.release()
	case is == HardFault:
		// Everything goes at once: a leaving ends first.
		return append(g.release(), g.setFault(now, is)...)
	case is == SoftFault && was == NoFault:
		return g.hold(now, -1, g.fold(g.setFault(now, is)))
	case is == SoftFault:
		return nil // down from hard: nothing is held any more
	}
	// Cleared: a leaving goes on to its end; if the peer went silent
	// meanwhile, the members' timers make this box master again (Kept).
	return g.fold(g.setFault(now, NoFault))
}

// fold keeps a leaving member's transitions out of the reports until its
// release: it still holds the addresses, so what it reports then is from
// MASTER to where it is at the release.
func (g *Group) fold(steps []Step) []Step {
	for k, st := range steps {
		l := g.leaves[st.Member]
		if st.Transition == nil || l == nil {
			continue
		}
		l.t.To, l.t.Cause = st.Transition.To, st.Transition.Cause
		steps[k].Holding, steps[k].Transition = st.Transition, nil
	}
	return steps
}

// fault is the group's fault: its worst member's.
func (g *Group) fault() FaultKind { return slices.Max(g.faults) }

func (g *Group) setFault(now time.Time, k FaultKind) []Step {
	var steps []Step
	for i, m := range g.members {
		steps = appendStep(steps, i, m.SetFault(now, k))
	}
	return steps
}

// Stop stops every member (masters send priority 0); a leaving ends
// first.
func (g *Group) Stop() []Step {
	steps := g.release()
	for i, m := range g.members {
		steps = appendStep(steps, i, m.Stop())
	}
	return steps
}

func appendStep(steps []Step, i int, out Output) []Step {
	if len(out.Send) == 0 && out.Transition == nil && !out.Announce {
		return steps
	}
	return append(steps, Step{Member: i, Output: out})
}
