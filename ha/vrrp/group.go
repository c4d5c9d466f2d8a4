package vrrp

import (
	"net/netip"
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
//   - A fault of any member (a tracked interface down) is the fault of
//     all, until every member's is cleared.
type Group struct {
	Name    string // "" for an instance outside any group
	members []*Machine
	faults  []bool // by member
}

// Step is one member's output.
type Step struct {
	Member int
	Output
}

// NewGroup returns a group of machines, in Init.
func NewGroup(name string, members ...*Machine) *Group {
	return &Group{Name: name, members: members, faults: make([]bool, len(members))}
}

// Members returns the group's machines.
func (g *Group) Members() []*Machine { return g.members }

// Start starts every member as backup (or fault).
func (g *Group) Start(now time.Time) []Step {
	var steps []Step
	for i, m := range g.members {
		steps = appendStep(steps, i, m.Start(now))
	}
	if g.faulty() {
		steps = append(steps, g.setFault(now, true)...)
	}
	return steps
}

// Deadline is the earliest member deadline; zero when none runs.
func (g *Group) Deadline() time.Time {
	var d time.Time
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
		steps = appendStep(steps, i, m.Tick(now, ready))
	}
	return steps
}

// Receive hands member i an advert from src (already checked), and
// applies the group's rule to what follows.
func (g *Group) Receive(now time.Time, i int, src netip.Addr, a Advert) []Step {
	out := g.members[i].Receive(now, src, a)
	steps := appendStep(nil, i, out)
	if t := out.Transition; t != nil && t.From == Master {
		steps = append(steps, g.demoteOthers(now, i)...)
	}
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

// SetFault records whether member i's tracked interfaces are down.
func (g *Group) SetFault(now time.Time, i int, fault bool) []Step {
	before := g.faulty()
	g.faults[i] = fault
	if g.faulty() == before {
		return nil
	}
	return g.setFault(now, !before)
}

func (g *Group) faulty() bool {
	for _, f := range g.faults {
		if f {
			return true
		}
	}
	return false
}

func (g *Group) setFault(now time.Time, fault bool) []Step {
	var steps []Step
	for i, m := range g.members {
		steps = appendStep(steps, i, m.SetFault(now, fault))
	}
	return steps
}

// Stop stops every member (masters send priority 0).
func (g *Group) Stop() []Step {
	var steps []Step
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
