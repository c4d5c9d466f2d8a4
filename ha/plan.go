// Package ha runs lbd's side of a failover pair: the VRRP instances of the
// configuration, and what the roles they give this box mean for the
// dataplane (which services' VIPs it serves, which floating addresses it
// holds), with tracked interfaces and keepalived-style notify programs.
package ha

import (
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha/vrrp"
)

// plan is what the configuration says about the pair, resolved once.
type plan struct {
	groups []vrrp.GroupSpec // Params.Self still unset
	// carries lists, per instance, the services whose VIPs it carries;
	// all names the instance that carries every service ("" for none).
	carries map[string][]string
	all     string
	// floating lists each instance's addresses (advertised and excluded).
	floating map[string][]desired.Floating
	// track lists, per instance, the interfaces whose loss is its fault:
	// its own and track_interfaces.
	track map[string][]string
	// order is the instances in configuration order.
	order []string
}

func newPlan(cfg *config.Config) plan {
	p := plan{carries: map[string][]string{}, floating: map[string][]desired.Floating{}, track: map[string][]string{}}
	byName := map[string]*config.VRRPInstance{}
	vips := map[netip.Addr]bool{}
	for i := range cfg.Services {
		for _, a := range cfg.Services[i].VIPs {
			vips[a] = true
		}
	}
	for i := range cfg.VRRP {
		v := &cfg.VRRP[i]
		byName[v.Name] = v
		p.order = append(p.order, v.Name)
		p.carries[v.Name] = v.Services
		if v.AllServices {
			p.all = v.Name
		}
		for _, a := range slices.Concat(v.Addresses, v.ExcludedAddresses) {
			// A carried service's VIP in the adverts' list is the service's
			// to bind (on lbd's link) and announce.
			if !vips[a.Prefix.Addr()] {
				p.floating[v.Name] = append(p.floating[v.Name], desired.Floating{Prefix: a.Prefix, Link: a.Interface, Held: true})
			}
		}
		p.track[v.Name] = appendNew([]string{v.Interface}, v.TrackInterfaces...)
	}
	grouped := map[string]bool{}
	for _, g := range cfg.VRRPSyncGroups {
		gs := vrrp.GroupSpec{Name: g.Name}
		for _, name := range g.Instances {
			grouped[name] = true
			gs.Instances = append(gs.Instances, spec(byName[name]))
		}
		p.groups = append(p.groups, gs)
	}
	for i := range cfg.VRRP {
		if v := &cfg.VRRP[i]; !grouped[v.Name] {
			p.groups = append(p.groups, vrrp.GroupSpec{Instances: []vrrp.InstanceSpec{spec(v)}})
		}
	}
	return p
}

func appendNew(list []string, more ...string) []string {
	for _, s := range more {
		if !slices.Contains(list, s) {
			list = append(list, s)
		}
	}
	return list
}

// spec is an instance's protocol settings, without its source address.
func spec(v *config.VRRPInstance) vrrp.InstanceSpec {
	addrs := make([]netip.Addr, len(v.Addresses))
	for i, a := range v.Addresses {
		addrs[i] = a.Prefix.Addr()
	}
	return vrrp.InstanceSpec{
		Name: v.Name,
		Link: vrrp.Link{Interface: v.Interface, Family: v.Family()},
		Params: vrrp.Params{
			Version: v.Version, VRID: v.VRID, Priority: v.Priority, Interval: v.AdvertInterval,
			Preempt: v.Preempt, PreemptDelay: v.PreemptDelay, Addrs: addrs,
			Peers: v.UnicastPeers, AuthPass: string(v.AuthPass),
		},
	}
}

// failover is what the dataplane serves when the instances named in master
// are master here and the others are not: every carried service is held
// unless its instance is master, and so is every floating address.
func (p plan) failover(master map[string]bool) (desired.Serving, []desired.Floating) {
	var held []string
	for _, name := range p.order {
		if !master[name] {
			held = append(held, p.carries[name]...)
		}
	}
	var fl []desired.Floating
	for _, name := range p.order {
		for _, f := range p.floating[name] {
			f.Held = !master[name]
			fl = append(fl, f)
		}
	}
	allHeld := p.all != "" && !master[p.all]
	return desired.HoldServices(allHeld, held...), fl
}
