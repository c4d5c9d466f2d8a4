package daemon

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/ha"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/status"
)

// errVRRPChanged refuses a reload that changes the failover pair: the
// instances are read at start. Restarting lbd on a master hands the
// addresses to the peer (priority 0) and comes back as backup.
var errVRRPChanged = errors.New("[[vrrp]], [[vrrp_sync_group]] or [ha] (ipvs_sync, conntrackd) changed: failover settings are read when lbd starts; " +
	"restart lbd to apply them (on the master, the peer takes over at once and this box comes back as backup)")

// startHA starts the failover pair of cfg, if it has one, before the
// dataplane's first sync: a box starts holding none of the pair's
// addresses, and takes them only as master.
func (d *daemon) startHA(ctx context.Context, cfg *config.Config) {
	d.vrrpStart = cfg
	if len(cfg.VRRP) == 0 {
		return
	}
	notifier, err := ha.NewNotifier(cfg, d.log, ha.NotifyOptions{})
	if err != nil {
		d.log.Error("VRRP notify programs will not run", "error", err)
	}
	opts := d.haOptions(ctx, cfg, notifier)
	d.ha = ha.New(cfg, opts)
	d.dp.SetFailover(d.ha.Failover())
	track := &haTracker{instances: cfg.VRRP, set: d.ha.SetFault, applied: d.dp.Applied}
	d.dp.OnSync(track.onSync)
	d.m.WatchVRRP(func() []vrrp.Status {
		st, _ := d.ha.Status()
		return st
	})
	// The box joins the election only once its dataplane has synced: a
	// master must be able to bind the addresses and forward at once (a
	// cold first sync of a large configuration takes seconds).
	synced := make(chan struct{})
	var once sync.Once
	d.haWaiting.Store(true)
	d.dp.OnSync(func(r dataplane.SyncResult) {
		if !r.Waiting {
			once.Do(func() { d.haWaiting.Store(false); close(synced) })
		}
	})
	d.wg.Go(func() {
		select {
		case <-synced:
		case <-ctx.Done():
			return
		}
		// A planned stop hands over only once this box's connections are
		// on their way to the peer (see connSync).
		pctx, handOver := context.WithCancel(context.WithoutCancel(ctx))
		defer handOver()
		go func() {
			<-ctx.Done()
			if d.cs != nil {
				d.cs.planned(pctx, d.isMaster())
			}
			handOver()
		}()
		if err := d.ha.Run(pctx); err != nil {
			d.log.Error("VRRP stopped; this box holds none of the pair's addresses", "error", err)
		}
		if notifier == nil {
			return
		}
		// The STOP notifications were just queued: give them a moment,
		// as keepalived waits a second for its stop scripts.
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := notifier.Close(cctx); err != nil {
			d.log.Warn("VRRP notify programs still running at stop were killed", "error", err)
		}
	})
}

// haOptions wires the Pair to the dataplane (through conntrackd's
// sequence with [ha.conntrackd]), the announcer, the notify programs and
// the bulk connection sync (with [ha.ipvs_sync]), starting the last two.
func (d *daemon) haOptions(ctx context.Context, cfg *config.Config, notifier *ha.Notifier) ha.Options {
	opts := ha.Options{
		Logger:     d.log,
		Listen:     listenVRRP,
		OnFailover: d.dp.SetFailover,
		Links:      ha.FollowLinks,
		OnAnnounce: d.ann.Again,
	}
	if cfg.Conntrackd.Enabled {
		d.ct = newPairConntrack(d, cfg.Conntrackd)
		d.ct.start(ctx)
		opts.OnFailover = d.ct.failover
	}
	var onEvent []func(vrrp.Event)
	if notifier != nil {
		onEvent = append(onEvent, notifier.Event)
	}
	if cfg.IPVSSync.Enabled {
		d.cs = newConnSync(d)
		d.wg.Go(func() { d.cs.run(ctx) })
		onEvent = append(onEvent, d.cs.event)
		opts.OnHolding = d.cs.holding
	}
	opts.OnEvent = func(e vrrp.Event) {
		for _, f := range onEvent {
			f(e)
		}
	}
	return opts
}

func listenVRRP(l vrrp.Link) (ha.Socket, error) {
	s, err := vrrp.Listen(l.Interface, l.Family)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// sameVRRP reports whether cfg has the failover pair lbd started with.
func (d *daemon) sameVRRP(cfg *config.Config) bool {
	old := d.vrrpStart
	sameSync := func(a, b config.IPVSSync) bool { a.Pos, b.Pos = config.Pos{}, config.Pos{}; return a == b }
	return old == nil || slices.EqualFunc(old.VRRP, cfg.VRRP, func(a, b config.VRRPInstance) bool { return a.Same(&b) }) &&
		slices.EqualFunc(old.VRRPSyncGroups, cfg.VRRPSyncGroups, func(a, b config.VRRPSyncGroup) bool { return a.Same(&b) }) &&
		sameSync(old.IPVSSync, cfg.IPVSSync) && old.Conntrackd.Same(&cfg.Conntrackd)
}

// releaseHA gives up the pair's addresses as lbd stops, after the VRRP
// instances have sent priority 0: the peer takes over at once, and a box
// that is not running must not answer for them. The rest of the
// dataplane stays in place.
func (d *daemon) releaseHA() {
	if d.ha == nil {
		return
	}
	d.dp.SetFailover(d.ha.Failover())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d.cs != nil && d.wasMaster {
		// Connections opened during the handover, before the neighbours
		// followed the peer: the peer is master, its backup daemon runs.
		d.cs.send(ctx, "planned stop, after the handover")
	}
	if err := d.dp.Release(ctx); err != nil {
		d.log.Error("giving up the failover pair's addresses failed; remove them by hand (ip addr) or the peer and this box both hold them", "error", err)
		return
	}
	d.log.Info("the failover pair's addresses are given up; the rest of the dataplane stays in place")
}

// isMaster reports whether any instance is master here now, and
// remembers it for releaseHA.
func (d *daemon) isMaster() bool {
	st, _ := d.ha.Status()
	for _, v := range st {
		if v.State == vrrp.Master {
			d.wasMaster = true
		}
	}
	return d.wasMaster
}

// vrrpStatus fills s's VRRP part.
func (d *daemon) vrrpStatus(s *status.Snapshot) {
	if d.ha == nil {
		return
	}
	if d.ct != nil {
		d.ct.status(s)
	}
	st, err := d.ha.Status()
	switch {
	case err != nil:
		s.VRRPError = err.Error()
	case d.haWaiting.Load():
		// Safe (the box holds none of the pair's addresses), but an admin
		// whose Consul is unreachable must see why this box never
		// becomes master.
		s.VRRPError = "not started: this box joins the election after its first dataplane sync, which waits for every source (see sync above)"
	}
	for _, v := range st {
		out := status.VRRP{Name: v.Name, Group: v.Group, Interface: v.Link.Interface, Family: v.Link.Family, VRID: int(v.VRID),
			Version: v.Version, Priority: int(v.Priority), State: v.State.String(), Holding: v.Holding, Since: v.Since, Transitions: v.Transitions,
			Sent: v.Sent, Received: v.Received, SendErrors: v.SendErrors}
		if v.Master.IsValid() {
			out.Master, out.MasterPriority = v.Master.String(), int(v.MasterPriority)
		}
		for r, n := range v.Refused {
			if r == vrrp.RefusedSelf {
				continue
			}
			if out.Refused == nil {
				out.Refused = map[string]uint64{}
			}
			out.Refused[r.String()] = n
		}
		s.VRRP = append(s.VRRP, out)
	}
}

// garpSchedule is when gratuitous ARP goes out for an address lbd starts
// answering for: with a failover pair, keepalived's garp_master_repeat
// adverts 10 ms apart, and the burst again after garp_master_delay (the
// largest of the instances'); nil (the announcer's default) without.
func garpSchedule(cfg *config.Config) []time.Duration {
	repeat, delay := 0, time.Duration(0)
	for _, v := range cfg.VRRP {
		repeat, delay = max(repeat, v.GARPRepeat), max(delay, v.GARPDelay)
	}
	var out []time.Duration
	for i := range repeat {
		out = append(out, time.Duration(i)*10*time.Millisecond)
		if delay > 0 {
			out = append(out, delay+time.Duration(i)*10*time.Millisecond)
		}
	}
	slices.Sort(out)
	return out
}
