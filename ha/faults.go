package ha

import (
	"context"
	"sync"

	"github.com/lbdproject/lbd/ha/vrrp"
)

// Fault is a reason, other than a tracked interface, for which the
// daemon puts instances in FAULT.
type Fault int

const (
	// FaultSyncs: the dataplane's syncs keep failing (track_syncs).
	FaultSyncs Fault = iota
	// FaultQuorum: a tracked service has fewer healthy real servers than
	// its quorum (track_services).
	FaultQuorum
)

func (f Fault) String() string {
	switch f {
	case FaultSyncs:
		return "syncs failing"
	case FaultQuorum:
		return "tracked service below quorum"
	}
	return "unknown"
}

// faults is what puts each instance in FAULT: its tracked interfaces
// down (a hard fault: give the addresses up at once), and the daemon's
// Faults (soft: this box still forwards, so a master keeps its addresses
// until the peer has taken over). Any one is enough; the worst decides.
type faults struct {
	// send keeps what is computed and sent in one order (two callers'
	// changes must not cross on the way to the runner).
	send     sync.Mutex
	mu       sync.Mutex
	linkDown map[string]bool
	daemon   map[string]map[Fault]bool // instance -> fault -> on
	// applied is what the runner was last told, per instance.
	applied map[string]vrrp.FaultKind
}

func newFaults() *faults {
	return &faults{linkDown: map[string]bool{}, daemon: map[string]map[Fault]bool{}, applied: map[string]vrrp.FaultKind{}}
}

// SetFault sets or clears one of the daemon's faults on an instance. It
// may be called before Run (it is applied when the instances start) and
// blocks at most until the instances have taken it or stopped.
func (p *Pair) SetFault(instance string, why Fault, on bool) {
	p.faults.mu.Lock()
	m := p.faults.daemon[instance]
	if m == nil {
		m = map[Fault]bool{}
		p.faults.daemon[instance] = m
	}
	changed := m[why] != on
	m[why] = on
	p.faults.mu.Unlock()
	if !changed {
		return
	}
	if on {
		p.opts.Logger.Warn("VRRP instance in FAULT: it gives the pair's addresses up once the peer has taken over", "instance", instance, "because", why.String())
	} else {
		p.opts.Logger.Info("VRRP fault cleared", "instance", instance, "was", why.String())
	}
	p.mu.Lock()
	r, ctx := p.runner, p.runCtx
	p.mu.Unlock()
	if r != nil {
		p.applyFaults(ctx, r)
	}
}

// setLink records a tracked interface's state.
func (p *Pair) setLink(name string, up bool) {
	p.faults.mu.Lock()
	defer p.faults.mu.Unlock()
	p.faults.linkDown[name] = !up
}

// applyFaults tells the runner which instances are in FAULT now, where
// that changed.
func (p *Pair) applyFaults(ctx context.Context, r *vrrp.Runner) {
	p.faults.send.Lock()
	defer p.faults.send.Unlock()
	p.faults.mu.Lock()
	var changes []faultChange
	for _, name := range p.plan.order {
		k := vrrp.NoFault
		for _, on := range p.faults.daemon[name] {
			if on {
				k = vrrp.SoftFault
			}
		}
		for _, l := range p.plan.track[name] {
			if p.faults.linkDown[l] {
				k = vrrp.HardFault
			}
		}
		// The runner starts with no instance in FAULT.
		if p.faults.applied[name] != k {
			p.faults.applied[name] = k
			changes = append(changes, faultChange{name, k})
		}
	}
	p.faults.mu.Unlock()
	for _, c := range changes {
		r.SetFault(ctx, c.instance, c.kind)
	}
}

type faultChange struct {
	instance string
	kind     vrrp.FaultKind
}
