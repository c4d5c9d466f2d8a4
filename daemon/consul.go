package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/consul/registrar"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/metrics"
	"github.com/lbdproject/lbd/status"
)

// consulParts follow Consul and register lbd's VIPs into it.
type consulParts struct {
	d        *daemon
	watcher  *consul.Watcher
	tag      string // the watcher's virtual-service tag
	reg      *registrar.Registrar
	problems atomic.Pointer[[]merge.Problem]
	regs     atomic.Pointer[map[string]config.ConsulRegister] // by lbd service name
}

// startConsul starts following Consul and registering lbd's VIPs into it.
// The agent's address comes from the first configuration that enables
// Consul; changing it needs a restart.
func startConsul(ctx context.Context, d *daemon, cfg *config.Config, client *consul.Client) *consulParts {
	c := &consulParts{
		d:       d,
		tag:     cfg.Consul.VirtualServices.Tag,
		watcher: consul.New(consul.Options{Client: client, Logger: d.log.With("source", "consul"), VirtualServiceTag: cfg.Consul.VirtualServices.Tag}),
		reg:     registrar.New(registrar.Options{Client: client, Logger: d.log.With("source", "consul-registrar")}),
	}
	d.dp.OnSync(c.register)
	d.m.WatchConsul(c.metrics)
	d.wg.Go(func() {
		if err := c.watcher.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("consul source stopped", "error", err)
		}
	})
	d.wg.Go(func() {
		if err := c.reg.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			d.log.Error("consul registrar stopped", "error", err)
		}
	})
	return c
}

// consulUpdates is Consul's snapshots; nil (never ready) while Consul is
// off.
func (d *daemon) consulUpdates() <-chan consul.Snapshot {
	if d.consul == nil {
		return nil
	}
	return d.consul.watcher.Updates()
}

// follow asks Consul for what cfg follows.
func (c *consulParts) follow(cfg *config.Config) { c.watcher.SetQueries(merge.Queries(cfg)) }

// follows reports whether the watcher has anything to read for cfg: a
// service that follows Consul, or tagged virtual services (the tag is the
// watcher's, fixed at its start).
func (c *consulParts) follows(cfg *config.Config) bool {
	return c.tag != "" || len(merge.Queries(cfg)) > 0
}

// report notes the services of cfg that register into Consul, and logs
// each refused registration once, when it appears, and says when it is
// resolved.
func (c *consulParts) report(cfg *config.Config, ps []merge.Problem) {
	regs := map[string]config.ConsulRegister{}
	for _, s := range cfg.Services {
		if s.Register != nil {
			regs[s.Name] = *s.Register
		}
	}
	c.regs.Store(&regs)
	old := c.problems.Load()
	c.problems.Store(&ps)
	var before []merge.Problem
	if old != nil {
		before = *old
	}
	for _, p := range ps {
		if !slices.Contains(before, p) {
			c.d.log.Warn("consul registration refused", "subject", p.Subject, "problem", p.Msg)
		}
	}
	for _, p := range before {
		if !slices.Contains(ps, p) {
			c.d.log.Info("consul registration problem resolved", "subject", p.Subject, "problem", p.Msg)
		}
	}
}

// register is a dataplane hook: after each sync that was applied, lbd's
// VIPs registered into Consul follow what the kernel serves. A service is
// passing while it meets its quorum (at least one healthy real server).
func (c *consulParts) register(res dataplane.SyncResult) {
	if res.Waiting {
		return // nothing applied yet
	}
	regs := c.regs.Load()
	if regs == nil {
		return
	}
	// The state this sync applied: no second Compute per sync.
	st, ok := c.d.dp.Applied()
	if !ok {
		return
	}
	c.reg.Set(registrations(*regs, st, res.Failed))
}

// registrations lists one Consul registration per VIP of each service
// that asks for it; NodePort-like virtual servers are not registered. A
// virtual server the kernel refused (failed) is registered critical.
func registrations(regs map[string]config.ConsulRegister, st desired.State, failed []lvs.Key) []registrar.Registration {
	var out []registrar.Registration
	vips := map[netip.Addr]bool{}
	for _, v := range st.VIPs {
		vips[v] = true
	}
	for _, vs := range st.Services {
		r, ok := regs[vs.Name]
		if !ok || !vips[vs.Key.Addr] {
			continue
		}
		quorum := max(vs.Quorum, 1)
		healthy, notes := vs.Healthy >= quorum, fmt.Sprintf("%d healthy real servers, quorum %d", vs.Healthy, quorum)
		if _, refused := slices.BinarySearchFunc(failed, vs.Key, lvs.Key.Compare); refused {
			healthy, notes = false, "the kernel refused this virtual server at the last sync (see lbd status)"
		}
		out = append(out, registrar.Registration{
			ID:      fmt.Sprintf("lbd-%s-%s-%d-%s", vs.Name, vs.Key.Addr, vs.Key.Port, vs.Key.Protocol),
			Name:    r.Name,
			Address: vs.Key.Addr,
			Port:    vs.Key.Port,
			Tags:    slices.Clone(r.Tags),
			Meta:    map[string]string{"lbd-service": vs.Name, "lbd-protocol": string(vs.Key.Protocol)},
			Healthy: healthy,
			Notes:   notes,
		})
	}
	return out
}

// metrics is what the metrics show of Consul.
func (c *consulParts) metrics() metrics.ConsulState {
	st := c.watcher.Status()
	out := metrics.ConsulState{Connected: st.Connected, LastContact: st.LastContact, Requests: st.Requests, Errors: st.Errors}
	if ps := c.problems.Load(); ps != nil {
		out.Problems = len(*ps)
	}
	return out
}

// status is what lbd status shows of Consul; nil when it is off.
func (c *consulParts) status() *status.Consul {
	if c == nil {
		return nil
	}
	st := c.watcher.Status()
	out := &status.Consul{
		Connected: st.Connected, Synced: st.Synced, Error: st.Err, LastContact: st.LastContact,
		LastError: st.LastError, LastErrorTime: st.LastErrorTime, Queries: st.Queries, Tagged: st.Tagged,
		Requests: st.Requests, Errors: st.Errors,
	}
	if ps := c.problems.Load(); ps != nil {
		for _, p := range *ps {
			out.Problems = append(out.Problems, p.String())
		}
	}
	for _, r := range c.reg.Registrations() {
		out.Registrations = append(out.Registrations, status.Registration{
			ID: r.ID, Name: r.Name, Address: netip.AddrPortFrom(r.Address, r.Port).String(), Healthy: r.Healthy, Error: r.Error,
		})
	}
	return out
}
