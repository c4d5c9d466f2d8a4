// Package valve is lbd's safety valve: a change the admin did not make by
// editing the configuration (discovery answering empty, health failing
// everywhere, a source answering short right after a restart) may not
// delete more than max_delete_fraction of the virtual servers or real
// servers at once. What it would delete is held back; every other part of
// the change goes in.
//
// The valve decides from values only: the desired state a sync computed,
// the inputs it came from, and the edition of the configuration (a name of
// its content that whoever delivers the configuration sets: a new edition
// is the admin's edit). The dataplane runs it on every sync and `lbd plan
// --diff` runs it for the first sync of a restarted lbd, so both agree.
package valve

import (
	"fmt"
	"reflect"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// Input is what one sync computed its desired state from.
type Input struct {
	// Sources are the desired state's inputs (without Prev).
	Sources desired.Input
	// Edition names the configuration's content (the hash of its files):
	// a new edition is the admin's edit, whose deletions are meant. The
	// same edition with other discovery or health is not.
	Edition string
}

// Measure is what a hold counts.
type Measure uint8

const (
	VirtualServers Measure = iota + 1
	RealServers
)

func (m Measure) String() string {
	switch m {
	case VirtualServers:
		return "virtual servers"
	case RealServers:
		return "real servers"
	}
	return "nothing"
}

// Base is the state a hold measured the deletions against.
type Base uint8

const (
	// Applied is the state the last sync applied.
	Applied Base = iota + 1
	// HoldStart is the applied state when the hold began: while it holds,
	// additions meanwhile cannot dilute the held deletions below the limit.
	HoldStart
	// Restart is what lbd's virtual servers held in the kernel when lbd
	// started over unchanged files.
	Restart
	// Edit is the edited configuration with the sources as they answered
	// before the hold: what the admin's edit alone would keep.
	Edit
)

func (b Base) String() string {
	switch b {
	case Applied:
		return "the state last applied"
	case HoldStart:
		return "the state when the hold began"
	case Restart:
		return "the kernel at restart"
	case Edit:
		return "the edited configuration with the sources' last good answer"
	}
	return "nothing"
}

// Hold says what the valve held back; the zero Hold holds nothing.
type Hold struct {
	What        Measure
	Gone, Of    int // would delete Gone of Of
	MaxFraction float64
	Against     Base
}

// Active reports whether deletions were held back.
func (h Hold) Active() bool { return h.What != 0 }

func (h Hold) String() string {
	if !h.Active() {
		return ""
	}
	return fmt.Sprintf("would delete %d of %d %s at once (max_delete_fraction %g) without a configuration edit", h.Gone, h.Of, h.What, h.MaxFraction)
}

// Decision is the valve's verdict on one sync.
type Decision struct {
	// State is what to apply: the computed state, or it with the held
	// deletions put back.
	State desired.State
	Hold  Hold
}

// Valve keeps what the decisions measure against. It is not safe for
// concurrent use: the sync runner serialises syncs.
type Valve struct {
	// applied is the state the last sync applied, in is its input.
	applied *desired.State
	in      Input
	// holdBase is the state deletions are measured against while a hold
	// lasts; nil when nothing is held.
	holdBase *desired.State
	// restart is what lbd's virtual servers held at start, for the first
	// decision when its edition is restartEdition.
	restart        []desired.Service
	restartEdition string
	// good is the input of the last decision that held nothing: what the
	// sources said before an incident, for measuring an edit (editBase).
	good Input
}

// SetRestartBaseline gives the first decision what lbd's virtual servers
// held when it started (kernel: their destinations with a weight, sorted
// by key) and the edition lbd last applied before it stopped: when the
// first sync applies that very edition, the files are unchanged and a
// source answering short right after a restart (Consul hiding a service)
// cannot drain more than max_delete_fraction of those real servers either.
func (v *Valve) SetRestartBaseline(edition string, kernel []desired.Service) {
	v.restart, v.restartEdition = kernel, edition
}

// Decide measures next, computed from in, against what was applied, and
// returns what to apply. Record what was applied with Applied.
func (v *Valve) Decide(next desired.State, in Input) (dec Decision) {
	maxFraction := in.Sources.Config.Sync.MaxDeleteFraction
	defer func() {
		v.restart = nil // for the first decision only
		if !dec.Hold.Active() {
			v.good = in
		}
	}()
	switch {
	case v.applied == nil && v.restart != nil && in.Edition != "" && in.Edition == v.restartEdition:
		// The first sync after a restart, with the files unchanged: a
		// source that answers short now is no edit either.
		base := restartBase(v.restart, next.Services)
		return v.hold(base, base, next, maxFraction, Restart)
	case v.applied == nil:
		v.holdBase = nil
		return Decision{State: next}
	case in.Edition != v.in.Edition:
		return v.decideEdit(next, in, maxFraction)
	}
	base, against := *v.applied, Applied
	if v.holdBase != nil {
		base, against = *v.holdBase, HoldStart
	}
	return v.hold(base, *v.applied, next, maxFraction, against)
}

// decideEdit decides on the admin's edit: what it deletes is meant, but
// only that. When the sync deletes much, or a hold is on, the new
// configuration with the sources as they answered before any hold tells
// what the edit alone would keep (a Compute more, for such syncs only).
func (v *Valve) decideEdit(next desired.State, in Input, maxFraction float64) Decision {
	if v.holdBase == nil && !tooManyDeletes(*v.applied, next, maxFraction).Active() {
		return Decision{State: next}
	}
	var base desired.State
	switch {
	case v.good.Sources.Config != nil:
		base = editBase(v.good.Sources, in.Sources)
	case v.holdBase != nil:
		// Held since the restart: no earlier answer of the sources to
		// compute with, but the kernel's real servers of the services the
		// edit left as they were stay held.
		base = unchangedOnly(*v.holdBase, *v.applied, v.in.Sources.Config, in.Sources.Config)
	default:
		return Decision{State: next}
	}
	return v.hold(base, base, next, maxFraction, Edit)
}

// Applied records what a sync applied (the decision's state) and its
// input; it is recorded even when a write failed, so that one virtual
// server the kernel keeps refusing does not make every later sync look
// like an edit, and held deletions stay held.
func (v *Valve) Applied(st *desired.State, in Input) {
	v.applied, v.in = st, in
}

// hold measures next's deletions against base and, when they are too
// many, puts back what next removes from keep. While it holds, base stays
// the measure.
func (v *Valve) hold(base, keep, next desired.State, maxFraction float64, against Base) Decision {
	h := tooManyDeletes(base, next, maxFraction)
	if !h.Active() {
		v.holdBase = nil
		return Decision{State: next}
	}
	h.Against = against
	v.holdBase = &base
	return Decision{State: desired.KeepRemoved(keep, next), Hold: h}
}

// tooManyDeletes says what going from applied to next deletes beyond the
// limit: virtual servers first, then real servers. Both lists are sorted
// by key.
func tooManyDeletes(applied, next desired.State, maxFraction float64) Hold {
	var svcGone, dests, destGone int
	desired.Pair(applied.Services, next.Services, func(a, n *desired.Service) {
		switch {
		case a == nil:
			return // new: no deletion
		case n == nil:
			svcGone++
			destGone += len(a.Dests)
		default:
			destGone += desired.Gone(a.Dests, n.Dests)
		}
		dests += len(a.Dests)
	})
	over := func(gone, total int) bool {
		return total > 0 && float64(gone)/float64(total) > maxFraction
	}
	switch {
	case over(svcGone, len(applied.Services)):
		return Hold{What: VirtualServers, Gone: svcGone, Of: len(applied.Services), MaxFraction: maxFraction}
	case over(destGone, dests):
		return Hold{What: RealServers, Gone: destGone, Of: dests, MaxFraction: maxFraction}
	}
	return Hold{}
}

// restartBase is the baseline after a restart: the kernel's virtual
// servers that the new state still has. Only their real servers are
// guarded: a virtual server the kernel shows carries too little (no source
// ranges, no SNAT mode) to be put back faithfully.
func restartBase(kernel, next []desired.Service) desired.State {
	var base desired.State
	desired.Pair(kernel, next, func(k, n *desired.Service) {
		if k != nil && n != nil {
			base.Services = append(base.Services, *k)
		}
	})
	return base
}

// unchangedOnly keeps the virtual servers of base whose service (named by
// applied) is the same in old and cfg.
func unchangedOnly(base, applied desired.State, old, cfg *config.Config) desired.State {
	names := make(map[lvs.Key]string, len(applied.Services))
	for _, s := range applied.Services {
		names[s.Key] = s.Name
	}
	before, after := old.ServicesByName(), cfg.ServicesByName()
	var out desired.State
	for _, s := range base.Services {
		o, n := before[names[s.Key]], after[names[s.Key]]
		if o != nil && n != nil && o.Same(n) {
			out.Services = append(out.Services, s)
		}
	}
	return out
}

// editBase is the state the new configuration (in.Config) would give with
// the discovery and health of good, the inputs of the last sync the valve
// did not hold: for the services the edit left as they were, the real
// servers discovery had then; for the others, none (what the edit changed
// is the admin's to delete). Consul-defined virtual services stay when the
// edit changed neither how they are defined nor claimed their name or
// VIP:port.
func editBase(good, in desired.Input) desired.State {
	old, cfg := good.Config, in.Config
	before := old.ServicesByName()
	discovered := map[string][]config.RealServer{}
	taken := map[lvs.Key]bool{}
	names := map[string]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		names[s.Name] = true
		for _, v := range s.VIPs {
			taken[lvs.Key{Addr: v, Port: s.Port, Protocol: s.Protocol}] = true
		}
		if o := before[s.Name]; o != nil && o.Same(s) {
			discovered[s.Name] = good.Discovered[s.Name]
		}
	}
	var services []config.Service
	if reflect.DeepEqual(old.Consul.VirtualServices, cfg.Consul.VirtualServices) {
		for _, s := range good.DiscoveredServices {
			claimed := names[s.Name]
			for _, v := range s.VIPs {
				claimed = claimed || taken[lvs.Key{Addr: v, Port: s.Port, Protocol: s.Protocol}]
			}
			if !claimed {
				services = append(services, s)
			}
		}
	}
	return desired.Compute(desired.Input{Config: cfg, Discovered: discovered, DiscoveredServices: services,
		Health: good.Health, HostAddrs: in.HostAddrs, Serving: in.Serving})
}
