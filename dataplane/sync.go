package dataplane

import (
	"context"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/runner"
	"github.com/lbdproject/lbd/dataplane/valve"
)

// sync is the runner's work: compute the desired state from the latest
// inputs, let the safety valve decide, apply, record.
func (d *Dataplane) sync(_ context.Context, why runner.Reason) error {
	res := SyncResult{Reason: why, Start: time.Now()}
	d.mu.Lock()
	d.syncStart = res.Start
	changedAt := d.in.changedAt
	d.in.changedAt = time.Time{}
	if r := d.in.restart; r != nil {
		d.valve.SetRestartBaseline(r.edition, r.kernel)
		d.in.restart, d.startKernel = nil, r.kernel
	}
	d.mu.Unlock()
	st, in, gen, ok := d.desired()
	if !ok {
		// Sources have not all delivered: applying now could delete what a
		// slower source would keep.
		res.Waiting = true
		d.finish(res)
		return nil
	}
	// A copy: the valve's decision below replaces st, and other goroutines
	// (views, takeovers) compute from computed.
	computed := st
	d.mu.Lock()
	d.computed = &computed
	d.mu.Unlock()
	dec := d.valve.Decide(st, in)
	st, res.Held, res.Edition = dec.State, dec.Hold, in.Edition
	// The first sync that applies reconciles against the kernel whatever
	// its reason: the initial one may have been skipped while the sources
	// loaded, and a later requested one would trust empty caches (and,
	// say, write the IPVS timeouts a restart found in place).
	out := d.apply.apply(&st, d.applied, in.Sources.Config, gen, why.Full() || d.applied == nil)
	res.Dumps, res.Writes, res.Err = out.dumps, out.writes, out.err()
	res.SetEntries, res.FilterRules, res.Draining, res.Failed = out.setEntries, out.rules, out.draining, out.failed
	res.Services = len(st.Services)
	res.SyncDaemons, res.SyncDaemonsErr = out.syncDaemons, out.syncErr
	switch {
	case d.applied != nil: // not the first sync
		logChanges(d.log, d.applied.Services, st.Services)
	case d.startKernel != nil: // the first after a restart
		logFirstChanges(d.log, d.startKernel, st.Services)
		d.startKernel = nil
	}
	d.valve.Applied(&st, in)
	d.mu.Lock() // Applied reads it from other goroutines
	d.applied = &st
	if !out.addrsSkipped && gen >= d.takeoverGen {
		d.takeoverVIPs = nil
	}
	d.mu.Unlock()
	res.Duration = time.Since(res.Start)
	d.programmed(&res, changedAt)
	d.finish(res)
	return res.Err
}

// publishKernel takes the IPVS applier's snapshot of the kernel for the
// views, in the sync goroutine as soon as the IPVS applier returns.
func (d *Dataplane) publishKernel() {
	ks, ok := d.apply.ipvs.(KernelSnapshotter)
	if !ok {
		return
	}
	snap := ks.Snapshot()
	d.mu.Lock()
	d.kernel = snap
	d.mu.Unlock()
}

// programmed sets the sync's network-programming latency, or keeps when
// the change it owes arrived for the retry of a failed sync.
func (d *Dataplane) programmed(res *SyncResult, changedAt time.Time) {
	switch {
	case changedAt.IsZero():
	case res.Err == nil && res.Writes > 0:
		res.Programming = time.Since(changedAt)
	case res.Err != nil:
		d.mu.Lock()
		if d.in.changedAt.IsZero() || changedAt.Before(d.in.changedAt) {
			d.in.changedAt = changedAt
		}
		d.mu.Unlock()
	}
}

// desired computes the desired state from the current inputs, and returns
// them (without Prev) with the generation of their failover part; ok is
// false until a configuration is set.
func (d *Dataplane) desired() (desired.State, valve.Input, uint64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	src := d.in.src
	if src.Config == nil {
		return desired.State{}, valve.Input{}, 0, false
	}
	in := desired.Input{Config: src.Config, Discovered: src.Reals, DiscoveredServices: src.Services,
		Health: d.in.health, HealthVersion: d.in.healthVersion + 1, HostAddrs: d.in.hostAddrs, Serving: d.in.serving, Floating: d.in.floating, Prev: d.computed}
	st := desired.Compute(in)
	in.Prev = nil
	return st, valve.Input{Sources: in, Edition: src.Edition}, d.in.failoverGen, true
}

func (d *Dataplane) finish(res SyncResult) {
	d.mu.Lock()
	d.last = res
	d.syncStart = time.Time{}
	hooks := d.onSync
	d.mu.Unlock()
	switch {
	case res.Waiting:
		d.log.Debug("sync skipped: waiting for the first configuration")
	case res.Held.Active():
		d.log.Warn("safety valve: deletions held, other changes applied", "reason", res.Held.String(),
			"measured_against", res.Held.Against.String(), "writes", res.Writes)
	case res.Err != nil:
		d.log.Error("sync failed", "reason", res.Reason.String(), "writes", res.Writes, "error", res.Err)
	case res.Writes > 0:
		d.log.Info("sync applied", "reason", res.Reason.String(), "writes", res.Writes, "dumps", res.Dumps,
			"virtual_servers", res.Services, "draining", res.Draining, "duration", res.Duration)
	default:
		d.log.Debug("sync: kernel already up to date", "reason", res.Reason.String(), "dumps", res.Dumps, "duration", res.Duration)
	}
	for _, f := range hooks {
		f(res)
	}
}
