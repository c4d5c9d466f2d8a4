// Package daemon is `lbd run`: it wires the sources (the configuration
// files, Consul) through the merge and the health checks to the dataplane,
// and hangs the registrations, the status socket, the metrics and systemd's
// notifications off the syncs. Data flows one way:
//
//	file.Source, consul.Watcher → gate (merge) → healthcheck.Manager → dataplane.Dataplane → kernel
//	                                                                       ↳ registrar, status, metrics, systemd
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/announce"
	"github.com/lbdproject/lbd/dataplane/drift"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/sysctl"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/ha"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/metrics"
)

// DefaultStateDir is where lbd keeps which IPVS services it owns and the
// configuration it last applied: in /run, which ends with a reboot, as
// IPVS state does.
const DefaultStateDir = "/run/lbd"

// Options configures Run.
type Options struct {
	// ConfigPath is the main configuration file; conf.d beside it is
	// merged.
	ConfigPath string
	// StateDir keeps lbd's runtime state; keep it across restarts.
	StateDir string
	Logger   *slog.Logger
	// Version is shown in logs and lbd status.
	Version string
	// Reload, when set, makes lbd re-read the configuration at once on
	// every receive (SIGHUP).
	Reload <-chan os.Signal
}

// Run runs the daemon until ctx ends; stopping leaves the dataplane in
// place, so traffic keeps flowing. It returns an error when the kernel or
// the configuration source cannot be used.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	k, err := openKernel(opts.StateDir)
	if err != nil {
		return err
	}
	defer k.Close()
	sysctl.Report("/proc/sys", log)
	d := &daemon{opts: opts, log: log, k: k, m: metrics.New(), notify: &notifier{log: log},
		rejects: make(chan error, 1), hostAddrs: make(chan []netip.Addr, 1)}
	src, err := file.New(file.Options{Path: opts.ConfigPath, Logger: log, Load: reportingLoad(log, d.rejects, config.Load)})
	if err != nil {
		return err
	}
	d.src = src
	log.Info("lbd starting", "version", opts.Version, "config", opts.ConfigPath)
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		d.wg.Wait()
		d.releaseHA()
	}()
	errc := make(chan error, 1)
	d.wg.Go(func() { errc <- src.Run(runCtx) })
	return d.loop(runCtx, errc)
}

// daemon holds the running parts. Sources feed it on the main loop only;
// the dataplane, checks and status run on their own goroutines.
type daemon struct {
	opts   Options
	log    *slog.Logger
	k      *kernel
	src    *file.Source
	m      *metrics.Metrics
	notify *notifier
	wg     sync.WaitGroup

	// rejects carries the file source's load errors to the main loop;
	// hostAddrs, the box's addresses when they change.
	rejects   chan error
	hostAddrs chan []netip.Addr
	// rejection is why the latest configuration was refused after it
	// loaded (say, its Consul client cannot be built); nil once one is
	// taken into force. Read by status.
	rejection atomic.Pointer[rejection]
	// inForce is the file source's state when its configuration was taken
	// into force; status shows it rather than a refused newer one.
	inForce atomic.Pointer[file.Status]
	early   *earlyStatus // the status socket while no configuration is valid

	// Started by the first configuration.
	dp     *dataplane.Dataplane
	ann    *announce.Announcer
	health *healthcheck.Manager
	consul *consulParts   // nil until a configuration enables Consul
	ha     *ha.Pair       // nil without [[vrrp]]
	ct     *pairConntrack // nil without [ha.conntrackd]
	// haWaiting: the VRRP instances wait for the first applied sync.
	haWaiting atomic.Bool
	cs        *connSync // nil without [ha.ipvs_sync]
	onlink    *onLink   // the direct-routing real servers' link check
	// wasMaster: this box was master as a planned stop began (written
	// before the instances stop, read by releaseHA after).
	wasMaster bool
	// vrrpStart is the first configuration: its [[vrrp]] tables are the
	// ones that run.
	vrrpStart *config.Config

	gate gate
	// written is the edition last recorded in the state directory; the
	// sync goroutine's.
	written string
}

// loop takes the sources' updates until the configuration source stops.
func (d *daemon) loop(ctx context.Context, errc <-chan error) error {
	updates := d.src.Updates()
	for {
		select {
		case <-d.opts.Reload:
			d.log.Info("SIGHUP: re-reading configuration")
			d.src.Reload()
		case cfg, ok := <-updates:
			if !ok { // the source stopped; its error follows on errc
				updates = nil
				continue
			}
			d.configure(ctx, cfg)
		case err := <-d.rejects:
			d.rejected(ctx, err)
		case addrs := <-d.hostAddrs:
			// Consul's real servers are checked against them.
			d.gate.host = addrs
			d.apply()
		case snap := <-d.consulUpdates():
			d.gate.snap = snap
			d.apply()
		case err := <-errc:
			d.notify.stopping()
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("configuration source: %w", err)
			}
			d.log.Info("lbd stopped; the dataplane stays in place")
			return nil
		}
	}
}

// configure takes a new configuration into force: the first one starts
// the dataplane, one that enables Consul starts following it. Whatever
// can fail is tried before anything changes: a configuration that cannot
// be applied is refused like an invalid one, and the last good one stays.
func (d *daemon) configure(ctx context.Context, cfg *config.Config) {
	if d.dp != nil && !d.sameVRRP(cfg) {
		d.refuse(ctx, errVRRPChanged)
		return
	}
	var client *consul.Client
	if cfg.Consul.Enabled && d.consul == nil {
		c, err := consul.NewClient(cfg.Consul)
		if err != nil {
			d.refuse(ctx, fmt.Errorf("consul: %w", err))
			return
		}
		client = c
	}
	d.m.ObserveConfigLoad(true, time.Now())
	sysctl.Setup("/proc/sys", sysctl.Needs{IPv6: cfg.UsesIPv6(), StrictARP: cfg.Dataplane.StrictARP}, d.log)
	if d.dp == nil {
		d.stopEarlyStatus()
		d.start(ctx, cfg)
	}
	if client != nil {
		d.consul = startConsul(ctx, d, cfg, client)
	}
	if d.consul != nil {
		d.consul.follow(cfg)
	}
	st := d.src.Status()
	d.accepted(st)
	audit(d.log, st.Hash, d.gate.cfg, cfg)
	d.gate.cfg, d.gate.edition = cfg, st.Hash
	d.apply()
}

// start builds the dataplane and what hangs off it. The runner's timings,
// the interface, the status socket and the metrics address come from the
// first configuration; changing them needs a restart.
func (d *daemon) start(ctx context.Context, cfg *config.Config) {
	d.ann = announce.New(announce.Options{Logger: d.log, Gratuitous: garpSchedule(cfg)})
	d.wg.Go(func() {
		if err := d.ann.Run(ctx); err != nil {
			d.log.Error("ARP/NDP announcer stopped", "error", err)
		}
	})
	d.dp = d.k.newDataplane(cfg, d.log, d.ann)
	d.dp.OnSync(d.m.ObserveSync)
	d.dp.OnSync(d.notify.onSync)
	d.dp.OnSync(d.recordApplied)
	d.startOnLink(ctx)
	d.health = healthcheck.New(healthcheck.Options{
		Logger: d.log,
		OnChange: func(h map[lvs.HealthKey]bool) {
			d.m.SetHealth(h)
			d.dp.SetHealth(h)
		},
		OnResult: d.m.ObserveCheck,
	})
	d.restore()
	d.startHA(ctx, cfg)
	d.wg.Go(func() { d.health.Run(ctx) })
	// The box's addresses are known before the first sync, so it does not
	// remove NodePort-like services to re-add them.
	if addrs, err := hostaddrs.List(cfg.Dataplane.Interface); err == nil {
		d.dp.SetHostAddrs(addrs)
		d.gate.host = addrs
	}
	d.wg.Go(func() {
		hostaddrs.Follow(ctx, d.log, cfg.Dataplane.Interface, func(addrs []netip.Addr) {
			d.dp.SetHostAddrs(addrs)
			// The only sender: after the drain the send cannot block,
			// and the loop merges with the latest addresses.
			select {
			case <-d.hostAddrs:
			default:
			}
			d.hostAddrs <- addrs
		})
	})
	d.wg.Go(func() { d.dp.Loop(ctx) })
	d.wg.Go(func() { drift.Watch(ctx, d.k.driftOptions(cfg, d.log, d.dp)) })
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
