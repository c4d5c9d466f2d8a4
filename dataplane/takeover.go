package dataplane

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// addrGate lets a takeover bind the pair's addresses without waiting for
// a sync already under way (a full one reads every subsystem of the
// kernel: seconds with many services, all of it lost to clients), and
// keeps that older sync from undoing the takeover. The address appliers
// and the announcer are used under mu only, by syncs and takeovers alike.
type addrGate struct {
	mu sync.Mutex
	// gen is the generation of the failover inputs (SetFailover,
	// SetServing) last applied: what was computed from older inputs leaves
	// the addresses be, as the sync the newer inputs asked for follows.
	gen uint64
	// done is set once a sync applied the addresses; vips and announce
	// are what is bound and announced since.
	done     bool
	vips     []netip.Addr
	announce map[string][]netip.Addr
}

// addrsApplied is what the address part of a sync did.
type addrsApplied struct {
	part
	// skipped: newer failover inputs were applied meanwhile.
	skipped bool
	// before is what was bound before, known only after the first sync.
	before []netip.Addr
	known  bool
}

// applyAddrsGated binds st's addresses (and, with early, announces them)
// unless a takeover of newer inputs came first.
func (a *appliers) applyAddrsGated(st *desired.State, gen uint64, full, early bool) addrsApplied {
	g := &a.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen < g.gen {
		return addrsApplied{skipped: true}
	}
	out := addrsApplied{before: g.vips, known: g.done}
	out.part = a.applyAddrs(st, full)
	g.gen, g.done, g.vips = gen, true, st.VIPs
	if early {
		a.announce.Set(st.Announce)
		g.announce = st.Announce
	}
	return out
}

// announceGated hands the announcer st's set unless a takeover of newer
// inputs came first.
func (a *appliers) announceGated(st *desired.State, gen uint64) {
	g := &a.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if gen >= g.gen {
		a.announce.Set(st.Announce)
		g.announce = st.Announce
	}
}

// takeover binds the addresses st adds to those bound, sets its floating
// addresses and announces at once. It never unbinds a VIP: the sync that
// follows does (after the safety valve, releasing their connections).
// binding, when set, is told the VIPs before they are written.
func (a *appliers) takeover(st *desired.State, gen uint64, binding func([]netip.Addr)) (part, bool) {
	g := &a.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done || gen <= g.gen {
		return part{}, false
	}
	vips := slices.Concat(g.vips, st.VIPs)
	slices.SortFunc(vips, netip.Addr.Compare)
	vips = slices.Compact(vips)
	if binding != nil {
		binding(vips)
	}
	var p part
	as, err := a.addrs.Apply(vips, false)
	p.add(as.Dumps, as.Writes, err, "addresses")
	if a.floating != nil {
		fs, err := a.floating.Apply(st.Floating, false)
		p.add(fs.Dumps, fs.Writes, err, "floating addresses")
	}
	g.gen, g.vips = gen, vips
	if a.announce != nil {
		ann := maps.Clone(g.announce)
		if ann == nil {
			ann = map[string][]netip.Addr{}
		}
		for link, add := range st.Announce {
			l := slices.Concat(ann[link], add)
			slices.SortFunc(l, netip.Addr.Compare)
			ann[link] = slices.Compact(l)
		}
		a.announce.Set(ann)
		g.announce = ann
	}
	return p, true
}

// takeovers runs a takeover for each change of the failover inputs until
// ctx is done, and after it asks for the sync at once: started together,
// the sync would take the CPU the takeover needs (its own part of the
// work the takeover just did is a no-op).
func (d *Dataplane) takeovers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.failedOver:
			d.takeover()
			d.run.Now()
		}
	}
}

// takeover applies the latest failover inputs' addresses ahead of the sync
// they asked for, when the virtual servers are in place already (the
// box's state as backup): otherwise the sync announces them after IPVS.
func (d *Dataplane) takeover() {
	d.mu.Lock()
	prev := d.applied
	d.mu.Unlock()
	st, _, gen, ok := d.desired()
	if !ok || prev == nil || !sameVirtualServers(prev.Services, st.Services) {
		return
	}
	start := time.Now()
	// Drift watching must know these addresses as lbd's before the kernel
	// tells of them (ExpectsVIP).
	p, ran := d.apply.takeover(&st, gen, func(vips []netip.Addr) {
		d.mu.Lock()
		d.takeoverVIPs, d.takeoverGen = vips, gen
		d.mu.Unlock()
	})
	switch {
	case !ran:
	case len(p.errs) > 0:
		d.log.Warn("failover: binding addresses ahead of the sync failed; the sync retries", "error", errors.Join(p.errs...))
	case p.writes > 0:
		d.log.Info("failover: addresses changed and announced ahead of the sync", "writes", p.writes, "duration", time.Since(start))
	}
}
