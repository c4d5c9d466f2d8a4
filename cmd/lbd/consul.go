package main

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/consul/registrar"
	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/metrics"
	"github.com/lbdproject/lbd/status"
)

// register is a dataplane hook: after each sync that was applied, lbd's
// VIPs registered into Consul follow what the kernel serves. A service is
// passing while it meets its quorum (at least one healthy real server).
func (d *daemon) register(res dataplane.SyncResult) {
	if res.Waiting {
		return // nothing applied yet
	}
	regs := d.regs.Load()
	if regs == nil {
		return
	}
	// The state this sync applied: no second Compute per sync.
	st, ok := d.dp.Applied()
	if !ok {
		return
	}
	d.reg.Set(registrations(*regs, st, res.Failed))
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

// consulState is what the metrics show of Consul.
func (d *daemon) consulState() metrics.ConsulState {
	st := d.consul.Status()
	out := metrics.ConsulState{Connected: st.Connected, LastContact: st.LastContact, Requests: st.Requests, Errors: st.Errors}
	if ps := d.problems.Load(); ps != nil {
		out.Problems = len(*ps)
	}
	return out
}

// consulStatus is what lbd status shows of Consul; nil when it is off.
func (d *daemon) consulStatus() *status.Consul {
	if d.consul == nil {
		return nil
	}
	st := d.consul.Status()
	out := &status.Consul{
		Connected: st.Connected, Synced: st.Synced, Error: st.Err, LastContact: st.LastContact,
		LastError: st.LastError, LastErrorTime: st.LastErrorTime, Queries: st.Queries, Tagged: st.Tagged,
		Requests: st.Requests, Errors: st.Errors,
	}
	if ps := d.problems.Load(); ps != nil {
		for _, p := range *ps {
			out.Problems = append(out.Problems, p.String())
		}
	}
	for _, r := range d.reg.Registrations() {
		out.Registrations = append(out.Registrations, status.Registration{
			ID: r.ID, Name: r.Name, Address: netip.AddrPortFrom(r.Address, r.Port).String(), Healthy: r.Healthy, Error: r.Error,
		})
	}
	return out
}
