package daemon

import (
	"log/slog"
	"net/netip"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
)

// gate holds the latest answer of each source until every source has
// answered once; then apply hands their merge to the checks and the
// dataplane.
type gate struct {
	cfg     *config.Config
	edition string // the hash of cfg's files
	snap    consul.Snapshot
	// host is the box's addresses (but lbd's link's): no real server
	// from Consul may have one.
	host    []netip.Addr
	waiting bool // logged that the first sync waits for Consul
	// seed is what lbd's virtual servers held at start, for the first
	// health.Set; nil after it.
	seed healthcheck.Seed
}

// apply merges the latest configuration and Consul snapshot and hands them
// to the checks and the dataplane. Nothing is applied until every source
// has answered once: a half-started daemon must not delete what Consul
// would have kept. A source with nothing to follow (Consul enabled only to
// register lbd's VIPs) has nothing to answer: it has delivered.
func (d *daemon) apply() {
	g := &d.gate
	if g.cfg == nil {
		return
	}
	if d.consul != nil && !g.snap.Synced && d.consul.follows(g.cfg) {
		if !g.waiting {
			d.log.Warn("waiting for Consul's first answer before the first sync; the kernel keeps what it has meanwhile")
			g.waiting = true
		}
		return
	}
	if g.waiting {
		d.log.Info("Consul answered; syncing")
		g.waiting = false
	}
	res := merge.Compute(merge.Input{Config: g.cfg, Snapshot: g.snap, HostAddrs: g.host})
	if d.consul != nil {
		d.consul.report(g.cfg, res.Problems)
	}
	d.health.Set(probes(g.cfg, res), g.seed)
	if g.seed != nil {
		d.dp.SetHealth(d.health.Health())
		g.seed = nil
	}
	d.dp.SetSources(dataplane.Sources{Config: g.cfg, Edition: g.edition, Reals: res.Reals, Services: res.Services})
}

// restore reads what lbd's virtual servers hold in the kernel, to seed
// the health checks of the first sync and the safety valve's restart
// baseline, and which configuration lbd last applied.
func (d *daemon) restore() {
	owned, err := ownership.Read(d.k.ipvs, d.k.ledger)
	if err != nil {
		d.log.Warn("cannot seed health checks from the kernel; they start in their initial state", "error", err)
		return
	}
	d.gate.seed = kernelSeed(owned)
	stored, err := ownership.ReadApplied(d.opts.StateDir)
	if err != nil {
		d.log.Warn("the safety valve does not guard the first sync", "error", err)
		return
	}
	d.written = stored
	d.dp.SetRestartBaseline(stored, ownership.Baseline(owned))
}

// recordApplied is a dataplane hook: once a sync has applied a new
// edition of the configuration, it is kept in the state directory for the
// safety valve of the next start.
func (d *daemon) recordApplied(res dataplane.SyncResult) {
	if res.Waiting || res.Edition == "" || res.Edition == d.written {
		return
	}
	if err := ownership.WriteApplied(d.opts.StateDir, res.Edition); err != nil {
		d.log.Warn("the safety valve will not guard the first sync after a restart", "error", err)
		return
	}
	d.written = res.Edition
}

// audit logs one line per configuration taken into force: its hash and
// what it changed.
func audit(log *slog.Logger, hash string, old, cur *config.Config) {
	if old == nil {
		// At start there is no configuration to differ from; what the
		// first sync changes in the kernel is logged by the dataplane.
		log.Info("configuration in force", "hash", hash, "files", len(cur.Files), "services", len(cur.Services))
		return
	}
	added, removed, changed := config.Changes(old, cur)
	log.Info("configuration in force", "hash", hash, "files", len(cur.Files), "services", len(cur.Services),
		"added", added, "removed", removed, "changed", changed)
}
