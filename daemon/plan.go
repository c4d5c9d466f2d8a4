package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/dataplane/valve"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
)

// ConsulWait bounds how long Diff waits for Consul's first complete
// answer.
const ConsulWait = 10 * time.Second

// DiffOptions are what Diff works from.
type DiffOptions struct {
	// Config is the configuration loaded from Path.
	Config *config.Config
	Path   string
	// HostAddrs are the box's addresses (hostaddrs.List).
	HostAddrs []netip.Addr
	StateDir  string
}

// Diff returns what the first full sync of a freshly (re)started lbd would
// change in this box's kernel, without changing it (see dataplane.DryRun):
// with health seeded from the kernel, Consul read once, and the safety
// valve deciding as after a restart; and what the valve would hold back.
// It needs root, as lbd run does.
func Diff(ctx context.Context, log *slog.Logger, o DiffOptions) ([]string, valve.Hold, error) {
	cfg, stateDir := o.Config, o.StateDir
	// The kernel first: without root there is no point in waiting for
	// Consul.
	k, err := openKernel(stateDir)
	if err != nil {
		return nil, valve.Hold{}, err
	}
	defer k.Close()
	owned, err := ownership.Read(k.ipvs, k.ledger)
	if err != nil {
		return nil, valve.Hold{}, fmt.Errorf("seeding health from the kernel: %w", err)
	}
	var snap consul.Snapshot
	if cfg.Consul.Enabled {
		if snap, err = readConsul(ctx, log, cfg, ConsulWait); err != nil {
			return nil, valve.Hold{}, err
		}
	}
	first := firstSync(log, cfg, o.HostAddrs, snap, kernelSeed(owned))
	if first.Sources.Edition, err = file.Hash(o.Path); err != nil {
		return nil, valve.Hold{}, err
	}
	if first.RestartEdition, err = ownership.ReadApplied(stateDir); err != nil {
		log.Warn("the safety valve does not guard the first sync", "error", err)
	} else {
		first.RestartKernel = ownership.Baseline(owned)
	}
	filters := map[int]iptables.Runner{}
	for fam, r := range k.filters {
		filters[fam] = r
	}
	return dataplane.DryRun(first, dataplane.DiffKernels{IPVS: k.ipvs, Ledger: k.ledger, Addrs: k.addrs, Sets: k.sets, Filters: filters})
}

// firstSync is what the first sync after a (re)start works from: the
// configuration merged with Consul's snapshot as apply merges them, and
// every check new, seeded from the kernel.
func firstSync(log *slog.Logger, cfg *config.Config, host []netip.Addr, snap consul.Snapshot, seed healthcheck.Seed) dataplane.FirstSync {
	res := merge.Compute(merge.Input{Config: cfg, Snapshot: snap, HostAddrs: host})
	for _, p := range res.Problems {
		log.Warn("consul registration refused", "subject", p.Subject, "problem", p.Msg)
	}
	return dataplane.FirstSync{
		Sources:   dataplane.Sources{Config: cfg, Reals: res.Reals, Services: res.Services},
		Health:    firstHealth(cfg, res, seed),
		HostAddrs: host,
	}
}

// readConsul reads Consul once for cfg, as the daemon waits for before
// its first sync.
func readConsul(ctx context.Context, log *slog.Logger, cfg *config.Config, wait time.Duration) (consul.Snapshot, error) {
	snap, err := consul.ReadOnce(ctx, log, cfg.Consul, merge.Queries(cfg), wait)
	if err != nil {
		return consul.Snapshot{}, fmt.Errorf("%w; without its answer the diff would show every real server and service it provides as a removal", err)
	}
	return snap, nil
}
