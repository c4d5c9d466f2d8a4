package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/announce"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/sysctl"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/consul/registrar"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/metrics"
	"github.com/lbdproject/lbd/status"
)

const (
	defaultStateDir = "/run/lbd"
	ledgerFile      = "ipvs-owned.json"
)

func newRunCommand() *cobra.Command {
	var path, stateDir, logFormat, logLevel string
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Long: `Run the lbd daemon in the foreground (systemd runs it this way).

lbd programs IPVS virtual servers and binds their VIPs to its dummy
interface from the configuration, re-syncing at a bounded rate: changes are
applied as diffs within min_sync_period, and every sync_period a full
reconcile repairs drift (for example after ipvsadm -C).

The configuration is watched: a valid edit of the main file or of a conf.d
file takes effect within a second; an invalid edit is rejected as a whole,
logged with its errors, and the last good configuration stays in force.
SIGHUP re-reads the configuration at once. SIGTERM and SIGINT stop the
daemon and leave the dataplane in place, so traffic keeps flowing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log, err := newLogger(c.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runDaemon(ctx, log, path, stateDir)
		},
	}
	c.Flags().StringVarP(&path, "config", "c", config.DefaultPath, "main configuration file (conf.d/*.toml beside it is merged)")
	c.Flags().StringVar(&stateDir, "state-dir", defaultStateDir, "directory for runtime state (which IPVS services lbd owns); keep it across restarts")
	c.Flags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return c
}

// runDaemon wires the sources to the dataplane and runs until ctx ends.
func runDaemon(ctx context.Context, log *slog.Logger, path, stateDir string) error {
	k, err := openKernel(stateDir)
	if err != nil {
		return err
	}
	defer k.Close()
	sysctl.Report("/proc/sys", log)

	src, err := file.New(file.Options{Path: path, Logger: log})
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	log.Info("lbd starting", "version", buildVersion(), "config", path)
	runCtx, stop := context.WithCancel(ctx)
	d := &daemon{log: log, k: k, src: src, m: metrics.New(), notify: &notifier{log: log}, stateDir: stateDir}
	defer func() {
		stop()
		d.wg.Wait()
	}()
	errc := make(chan error, 1)
	d.wg.Go(func() { errc <- src.Run(runCtx) })

	updates := src.Updates()
	var consulUpdates <-chan consul.Snapshot
	for {
		select {
		case <-hup:
			log.Info("SIGHUP: re-reading configuration")
			src.Reload()
		case cfg, ok := <-updates:
			if !ok { // the source stopped; its error follows on errc
				updates = nil
				continue
			}
			d.m.ObserveConfigLoad(true, time.Now())
			ensureSysctls(log, cfg)
			if d.dp == nil {
				d.start(runCtx, cfg)
			}
			if cfg.Consul.Enabled && d.consul == nil {
				if err := d.startConsul(runCtx, cfg); err != nil {
					return err
				}
				consulUpdates = d.consul.Updates()
			}
			if d.consul != nil {
				d.consul.SetQueries(merge.Queries(cfg))
			}
			hash := d.src.Status().Hash
			audit(log, hash, d.cfg, cfg)
			d.cfg, d.cfgHash = cfg, hash
			d.apply()
		case snap := <-consulUpdates:
			d.snap = snap
			d.apply()
		case err := <-errc:
			d.notify.stopping()
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("configuration source: %w", err)
			}
			log.Info("lbd stopped; the dataplane stays in place")
			return nil
		}
	}
}

// daemon holds the running parts. Sources feed it on the main loop only;
// the dataplane, checks and status run on their own goroutines.
type daemon struct {
	log    *slog.Logger
	k      *kernel
	src    *file.Source
	m      *metrics.Metrics
	notify *notifier
	wg     sync.WaitGroup

	dp     *dataplane.Dataplane
	ann    *announce.Announcer
	health *healthcheck.Manager
	consul *consul.Watcher
	reg    *registrar.Registrar

	cfg     *config.Config   // the latest configuration
	snap    consul.Snapshot  // Consul's latest snapshot
	waiting bool             // logged that the first sync waits for Consul
	seed    healthcheck.Seed // what lbd's virtual servers held at start, for the first health.Set
	cfgHash string           // the hash of cfg's files

	problems atomic.Pointer[[]merge.Problem]
	regs     atomic.Pointer[map[string]config.ConsulRegister] // by lbd service name

	// What the safety valve needs across a restart: the kernel's state at
	// start, for the first sync, when the files are those lbd last applied
	// (their hash, kept in the state directory, is the same).
	stateDir   string
	restart    []desired.Service
	storedHash string
	inForce    atomic.Pointer[cfgInForce] // the configuration handed to the dataplane
	written    string                     // the hash last written; the sync goroutine's
}

// start builds the dataplane and what hangs off it. The runner's timings,
// the interface, the status socket and the metrics address come from the
// first configuration; changing them needs a restart.
func (d *daemon) start(ctx context.Context, cfg *config.Config) {
	d.ann = announce.New(announce.Options{Logger: d.log})
	d.wg.Go(func() {
		if err := d.ann.Run(ctx); err != nil {
			d.log.Error("ARP announcer stopped", "error", err)
		}
	})
	d.dp = d.k.newDataplane(cfg, d.log, d.ann)
	d.dp.OnSync(d.m.ObserveSync)
	d.dp.OnSync(d.notify.onSync)
	d.health = healthcheck.New(healthcheck.Options{
		Logger: d.log,
		OnChange: func(h map[lvs.HealthKey]bool) {
			d.m.SetHealth(h)
			d.dp.SetHealth(h)
		},
		OnResult: d.m.ObserveCheck,
	})
	// Health is known before the first sync: seeded (by apply) from what
	// lbd's virtual servers hold, so a restart changes no weight.
	if owned, err := ipvs.ReadOwned(d.k.ipvs, d.k.ledger); err != nil {
		d.log.Warn("cannot seed health checks from the kernel; they start in their initial state", "error", err)
	} else {
		d.seed, d.restart = kernelSeed(owned), restartBaseline(owned)
	}
	stored, err := readAppliedHash(d.stateDir)
	if err != nil {
		d.log.Warn("the safety valve does not guard the first sync", "error", err)
	}
	d.storedHash, d.written = stored, stored
	d.dp.OnSync(d.recordApplied)
	d.wg.Go(func() { d.health.Run(ctx) })
	// The box's addresses are known before the first sync, so it does not
	// remove NodePort-like services to re-add them.
	if addrs, err := hostaddrs.List(cfg.Dataplane.Interface); err == nil {
		d.dp.SetHostAddrs(addrs)
	}
	d.wg.Go(func() { hostaddrs.Follow(ctx, d.log, cfg.Dataplane.Interface, d.dp.SetHostAddrs) })
	d.wg.Go(func() { d.dp.Loop(ctx) })
	d.wg.Go(func() { watchdog(ctx, d.log, d.notify, d.dp) })
	d.wg.Go(func() { d.notify.readyAfterGrace(ctx, readyGrace) })
	if sr, err := ipvs.OpenStats(); err != nil {
		d.log.Warn("IPVS counters unavailable in metrics", "error", err)
	} else {
		d.m.WatchIPVS(sr.Read, d.virtualServerNames)
		d.wg.Go(func() {
			<-ctx.Done()
			sr.Close()
		})
	}
	if cfg.Status.RealServerMetrics {
		d.m.WatchRealServers(d.dp.KernelConns, d.virtualServerNames)
	}
	d.wg.Go(func() { d.serveStatus(ctx, cfg.Status) })
}

// virtualServerNames maps lbd's virtual servers to their service, for the
// per-virtual-server metrics: from the last applied state, so a scrape
// does not compute the desired state (110 ms at 10,000 services).
func (d *daemon) virtualServerNames() map[lvs.Key]string {
	st, _ := d.dp.Applied()
	out := make(map[lvs.Key]string, len(st.Services))
	for _, s := range st.Services {
		out[s.Key] = s.Name
	}
	return out
}

// startConsul starts following Consul and registering lbd's VIPs into it.
// The agent's address comes from the first configuration that enables
// Consul; changing it needs a restart.
func (d *daemon) startConsul(ctx context.Context, cfg *config.Config) error {
	client, err := consul.NewClient(cfg.Consul)
	if err != nil {
		return fmt.Errorf("consul: %w", err)
	}
	d.consul = consul.New(consul.Options{Client: client, Logger: d.log.With("source", "consul"), VirtualServiceTag: cfg.Consul.VirtualServices.Tag})
	d.reg = registrar.New(registrar.Options{Client: client, Logger: d.log.With("source", "consul-registrar")})
	d.dp.OnSync(d.register)
	d.m.WatchConsul(d.consulState)
	d.wg.Go(func() {
		if err := d.consul.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("consul source stopped", "error", err)
		}
	})
	d.wg.Go(func() {
		if err := d.reg.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("consul registrar stopped", "error", err)
		}
	})
	return nil
}

// apply merges the latest configuration and Consul snapshot and hands them
// to the checks and the dataplane. Nothing is applied until every source
// has answered once: a half-started daemon must not delete what Consul
// would have kept.
func (d *daemon) apply() {
	if d.cfg == nil {
		return
	}
	if d.consul != nil && !d.snap.Synced {
		if !d.waiting {
			d.log.Warn("waiting for Consul's first answer before the first sync; the kernel keeps what it has meanwhile")
			d.waiting = true
		}
		return
	}
	if d.waiting {
		d.log.Info("Consul answered; syncing")
		d.waiting = false
	}
	res := merge.Merge(d.cfg, d.snap)
	d.reportProblems(res.Problems)
	regs := map[string]config.ConsulRegister{}
	for _, s := range d.cfg.Services {
		if s.Register != nil {
			regs[s.Name] = *s.Register
		}
	}
	d.regs.Store(&regs)
	d.health.Set(probes(d.cfg, res), d.seed)
	if d.seed != nil {
		d.dp.SetHealth(d.health.Health())
		d.seed = nil
	}
	if d.restart != nil {
		if d.cfgHash != "" && d.cfgHash == d.storedHash {
			d.dp.SetRestartBaseline(d.cfg, d.restart)
		}
		d.restart = nil
	}
	d.inForce.Store(&cfgInForce{cfg: d.cfg, hash: d.cfgHash})
	d.dp.SetSources(d.cfg, res.Reals, res.Services)
}

// cfgInForce is a configuration with the hash of its files.
type cfgInForce struct {
	cfg  *config.Config
	hash string
}

// recordApplied is a dataplane hook: once a sync has applied the latest
// configuration, its hash is kept in the state directory for the safety
// valve of the next start.
func (d *daemon) recordApplied(res dataplane.SyncResult) {
	in := d.inForce.Load()
	if res.Waiting || in == nil || in.hash == d.written || d.dp.AppliedConfig() != in.cfg {
		return
	}
	if err := writeAppliedHash(d.stateDir, in.hash); err != nil {
		d.log.Warn("the safety valve will not guard the first sync after a restart", "error", err)
		return
	}
	d.written = in.hash
}

// reportProblems logs each refused registration once, when it appears,
// and says when it is resolved.
func (d *daemon) reportProblems(ps []merge.Problem) {
	old := d.problems.Load()
	d.problems.Store(&ps)
	var before []merge.Problem
	if old != nil {
		before = *old
	}
	for _, p := range ps {
		if !slices.Contains(before, p) {
			d.log.Warn("consul registration refused", "subject", p.Subject, "problem", p.Msg)
		}
	}
	for _, p := range before {
		if !slices.Contains(ps, p) {
			d.log.Info("consul registration problem resolved", "subject", p.Subject, "problem", p.Msg)
		}
	}
}

// serveStatus serves the status socket and the metrics until ctx ends; a
// failure to listen is logged, not fatal: the dataplane matters more.
func (d *daemon) serveStatus(ctx context.Context, cfg config.Status) {
	snapshot := func() status.Snapshot {
		s := status.Build(buildVersion(), time.Now(), d.src.Status(), d.dp.View(), d.ann.Status(), d.health.ByKey())
		s.Consul = d.consulStatus()
		// Connection counts are read now: one read of /proc/net/ip_vs.
		if dests, err := ipvs.ProcConns(); err == nil {
			s.AddConns(conns(dests))
		}
		return s
	}
	go func() {
		if err := status.Serve(ctx, cfg.Socket, snapshot); err != nil {
			d.log.Error("status socket unavailable; lbd status will not answer", "error", err)
		}
	}()
	if cfg.MetricsListen == "" {
		return
	}
	if err := d.m.Serve(ctx, cfg.MetricsListen); err != nil {
		d.log.Error("metrics unavailable", "error", err)
	}
}

// ensureSysctls checks and sets the kernel settings the configuration
// relies on; what cannot be set is logged, since a read-only /proc/sys
// (the hardened unit) is handled by the package's sysctl.d file.
func ensureSysctls(log *slog.Logger, cfg *config.Config) {
	ipv6 := false
	for i := range cfg.Services {
		ipv6 = ipv6 || cfg.Services[i].Family() == 6
	}
	// Consul may define IPv6 services from an IPv6 pool at any time.
	if cfg.Consul.Enabled && cfg.Consul.VirtualServices.Tag != "" {
		for _, p := range cfg.Consul.VirtualServices.VIPPools {
			ipv6 = ipv6 || p.Addr().Is6()
		}
	}
	if ipv6 {
		if err := sysctl.KeepRouterAdvertisements("/proc/sys", log); err != nil {
			log.Warn("cannot keep router advertisements", "error", err)
		}
	}
	if err := sysctl.Ensure("/proc/sys", sysctl.Required(ipv6, cfg.Dataplane.StrictARP), log); err != nil {
		log.Warn("kernel settings lbd relies on are not in place", "error", err)
	}
}
