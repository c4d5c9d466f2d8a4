package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/announce"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/sysctl"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/healthcheck"
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
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	errc := make(chan error, 1)
	wg.Go(func() { errc <- src.Run(runCtx) })

	m := metrics.New()
	var dp *dataplane.Dataplane
	var health *healthcheck.Manager
	updates := src.Updates()
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
			m.ObserveConfigLoad(true, time.Now())
			ensureSysctls(log, cfg)
			if dp == nil {
				// The runner's timings, the interface, the status socket and
				// the metrics address come from the first configuration;
				// changing them needs a restart.
				ann := announce.New(announce.Options{Logger: log})
				wg.Go(func() {
					if err := ann.Run(runCtx); err != nil {
						log.Error("ARP announcer stopped", "error", err)
					}
				})
				dp = k.newDataplane(cfg, log, ann)
				dp.OnSync(m.ObserveSync)
				health = healthcheck.New(healthcheck.Options{
					Logger: log,
					OnChange: func(h map[healthcheck.Key]bool) {
						m.SetHealth(h)
						dp.SetHealth(healthInput(h))
					},
					OnResult: m.ObserveCheck,
				})
				// Health is known before the first sync: seeded from what the
				// kernel serves, so a restart changes no weight.
				health.Set(probes(cfg), kernelServed(k.ipvs))
				dp.SetHealth(healthInput(health.Health()))
				wg.Go(func() { health.Run(runCtx) })
				// The box's addresses are known before the first sync, so
				// it does not remove NodePort-like services to re-add them.
				if addrs, err := hostaddrs.List(); err == nil {
					dp.SetHostAddrs(addrs)
				}
				wg.Go(func() { hostaddrs.Follow(runCtx, log, dp.SetHostAddrs) })
				wg.Go(func() { dp.Loop(runCtx) })
				wg.Go(func() { serveStatus(runCtx, log, cfg.Status, src, dp, ann, health, m) })
			}
			health.Set(probes(cfg), nil)
			dp.SetConfig(cfg)
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("configuration source: %w", err)
			}
			log.Info("lbd stopped; the dataplane stays in place")
			return nil
		}
	}
}

// serveStatus serves the status socket and the metrics until ctx ends; a
// failure to listen is logged, not fatal: the dataplane matters more.
func serveStatus(ctx context.Context, log *slog.Logger, cfg config.Status, src *file.Source, dp *dataplane.Dataplane, ann *announce.Announcer, health *healthcheck.Manager, m *metrics.Metrics) {
	snapshot := func() status.Snapshot {
		return status.Build(buildVersion(), time.Now(), src.Status(), dp.View(), ann.Status(), health.ByKey())
	}
	go func() {
		if err := status.Serve(ctx, cfg.Socket, snapshot); err != nil {
			log.Error("status socket unavailable; lbd status will not answer", "error", err)
		}
	}()
	if cfg.MetricsListen == "" {
		return
	}
	if err := m.Serve(ctx, cfg.MetricsListen); err != nil {
		log.Error("metrics unavailable", "error", err)
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
	if ipv6 {
		if err := sysctl.KeepRouterAdvertisements("/proc/sys", log); err != nil {
			log.Warn("cannot keep router advertisements", "error", err)
		}
	}
	if err := sysctl.Ensure("/proc/sys", sysctl.Required(ipv6, cfg.Dataplane.StrictARP), log); err != nil {
		log.Warn("kernel settings lbd relies on are not in place", "error", err)
	}
}
