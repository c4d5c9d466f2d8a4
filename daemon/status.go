package daemon

import (
	"context"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/status"
)

// serveStatus serves the status socket and the metrics until ctx ends; a
// failure to listen is logged, not fatal: the dataplane matters more.
func (d *daemon) serveStatus(ctx context.Context, cfg config.Status) {
	go func() {
		if err := status.Serve(ctx, cfg.Socket, d.status); err != nil {
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

// status is what lbd status shows.
func (d *daemon) status() status.Snapshot {
	s := status.Build(d.opts.Version, time.Now(), d.configStatus(), d.dp.View(), d.ann.Status(), d.health.ByKey())
	s.Consul = d.consul.status()
	d.vrrpStatus(&s)
	s.AddOffLink(d.onlink.Problems())
	// Connection counts are read now: one read of /proc/net/ip_vs.
	if dests, err := ipvs.ProcConns(); err == nil {
		s.AddConns(conns(dests))
	}
	return s
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

// conns indexes the kernel's connection counts for status.
func conns(dests map[lvs.Key][]ipvs.Dest) map[string]map[string]status.Conns {
	out := make(map[string]map[string]status.Conns, len(dests))
	for k, ds := range dests {
		m := make(map[string]status.Conns, len(ds))
		for _, d := range ds {
			m[d.Addr.String()] = status.Conns{Active: d.ActiveConns, Inactive: d.InactiveConns}
		}
		out[k.String()] = m
	}
	return out
}
