package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
)

// vrrpProblem reports a problem at key of the table p locates (fallback:
// where the table starts).
type vrrpProblem func(p *provenance, fallback Pos, key, format string, args ...any)

// validateVRRP runs the checks of the [[vrrp]] and [[vrrp_sync_group]]
// tables against each other and against the services. globalsOK says that
// [dataplane] decoded, so that its interface is the admin's.
func validateVRRP(cfg *Config, sink *errorSink, globalsOK bool) {
	if len(cfg.VRRP) == 0 && len(cfg.VRRPSyncGroups) == 0 {
		return
	}
	problem := func(p *provenance, fallback Pos, key, format string, args ...any) {
		sink.add(newError(p.at(key, fallback), p.keyPath(key), format, args...))
	}
	dummy := ""
	if globalsOK {
		dummy = cfg.Dataplane.Interface
	}
	checkVRRPRouters(cfg, problem, dummy)
	carried, all := checkVRRPServices(cfg, problem)
	if all < 0 {
		// With services = ["*"], every service moves with one instance
		// (or another problem is reported): no VIP can be split.
		checkSharedVIPs(cfg, carried, problem)
	}
	checkVRRPAddresses(cfg, problem, dummy)
	checkSyncGroups(cfg, problem)
}

// checkVRRPRouters refuses a repeated instance name, a repeated virtual
// router (interface, family, VRID), and adverts on lbd's dummy link.
func checkVRRPRouters(cfg *Config, problem vrrpProblem, dummy string) {
	type router struct {
		ifname string
		family int
		vrid   uint8
	}
	names := map[string]Pos{}
	routers := map[router]int{}
	for i := range cfg.VRRP {
		v := &cfg.VRRP[i]
		if p, dup := names[v.Name]; dup && v.Name != "" {
			problem(&v.prov, v.Pos, "name", "instance name %q is already used by the instance at %s; expected unique names", v.Name, p)
		} else if !dup {
			names[v.Name] = v.prov.at("name", v.Pos)
		}
		if v.Interface != "" && v.VRID != 0 {
			r := router{v.Interface, v.Family(), v.VRID}
			if j, dup := routers[r]; dup {
				o := &cfg.VRRP[j]
				problem(&v.prov, v.Pos, "virtual_router_id", "%d is also the virtual router ID of instance %q (at %s) on %s for IPv%d; expected one unique per interface and family", v.VRID, o.Name, o.prov.at("virtual_router_id", o.Pos), v.Interface, r.family)
			} else {
				routers[r] = i
			}
		}
		if dummy != "" && v.Interface == dummy {
			problem(&v.prov, v.Pos, "interface", "%q is lbd's dummy link ([dataplane] interface), which reaches no peer; expected the link the peer is on", v.Interface)
		}
	}
}

// checkVRRPServices checks the services instances carry: they exist, have
// VIPs, and move with one instance; at most one instance says ["*"], and
// then no other names services. It returns the instance that names each
// service (by index) and the one that says ["*"] (-1: none).
func checkVRRPServices(cfg *Config, problem vrrpProblem) (carried map[string]int, all int) {
	services := cfg.ServicesByName()
	carried = map[string]int{}
	all = -1
	for i := range cfg.VRRP {
		v := &cfg.VRRP[i]
		if v.AllServices && all >= 0 {
			o := &cfg.VRRP[all]
			problem(&v.prov, v.Pos, "services", "instance %q carries every service already (services = [\"*\"] at %s); expected [\"*\"] in one instance only", o.Name, o.prov.at("services", o.Pos))
		} else if v.AllServices {
			all = i
		}
		for j, name := range v.Services {
			key := v.serviceKeys[j]
			s, ok := services[name]
			switch {
			case !ok:
				problem(&v.prov, v.Pos, key, "no service is named %q in the files; expected the name of a [[service]], or services = [\"*\"] for every service (Consul-defined ones included)", name)
			case len(s.VIPs) == 0 && s.FWMark != 0:
				problem(&v.prov, v.Pos, key, "service %q has no VIPs (your own rules mark its packets): nothing of it moves; expected a service with vips, or the addresses your rules match as the instance's floating addresses", name)
			case len(s.VIPs) == 0:
				problem(&v.prov, v.Pos, key, "service %q has no VIPs (it is NodePort-like only): nothing of it moves; expected a service with vips", name)
			}
			if k, dup := carried[name]; dup {
				o := &cfg.VRRP[k]
				problem(&v.prov, v.Pos, key, "service %q is also carried by instance %q (at %s); a service's VIPs move with one instance: expected it in the services of one instance", name, o.Name, o.prov.at(o.serviceKey(name), o.Pos))
				continue
			}
			carried[name] = i
		}
	}
	for i := range cfg.VRRP {
		v := &cfg.VRRP[i]
		for j, name := range v.TrackServices {
			if _, ok := services[name]; !ok && j < len(v.trackServiceKeys) {
				problem(&v.prov, v.Pos, v.trackServiceKeys[j], "no service is named %q in the files; expected the name of a [[service]] whose quorum the instance follows", name)
			}
		}
	}
	if all >= 0 {
		a := &cfg.VRRP[all]
		for i := range cfg.VRRP {
			if v := &cfg.VRRP[i]; i != all && len(v.Services) > 0 {
				problem(&v.prov, v.Pos, "services", "instance %q carries every service (services = [\"*\"] at %s); expected no other instance to name services", a.Name, a.prov.at("services", a.Pos))
			}
		}
	}
	return carried, all
}

// serviceKey is the key of service name in v.Services.
func (v *VRRPInstance) serviceKey(name string) string {
	if i := slices.Index(v.Services, name); i >= 0 && i < len(v.serviceKeys) {
		return v.serviceKeys[i]
	}
	return "services"
}

// checkSharedVIPs refuses two services that share a VIP but move with
// different instances, or one with an instance and one not: an address
// moves as a whole.
func checkSharedVIPs(cfg *Config, carried map[string]int, problem vrrpProblem) {
	carrier := func(s *Service) int {
		if i, ok := carried[s.Name]; ok {
			return i
		}
		return -1
	}
	type first struct{ service, carrier int }
	seen := map[netip.Addr]first{}
	reported := map[[2]int]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		c := carrier(s)
		for _, vip := range s.VIPs {
			f, dup := seen[vip]
			if !dup {
				seen[vip] = first{i, c}
				continue
			}
			if f.carrier == c || reported[[2]int{f.service, i}] {
				continue
			}
			reported[[2]int{f.service, i}] = true
			// The problem is at the carried service's name in services.
			at, other, otherCarrier := s, &cfg.Services[f.service], f.carrier
			if c < 0 {
				at, other, otherCarrier = other, s, c
			}
			v := &cfg.VRRP[carrier(at)]
			which := "which no instance carries"
			if otherCarrier >= 0 {
				which = fmt.Sprintf("which instance %q carries", cfg.VRRP[otherCarrier].Name)
			}
			problem(&v.prov, v.Pos, v.serviceKey(at.Name), "service %q shares VIP %s with service %q (at %s), %s; a VIP moves as a whole: expected both services in the services of one instance", at.Name, vip, other.Name, other.Pos, which)
		}
	}
}

// checkVRRPAddresses refuses an address in two instances, a service's VIP
// as an instance's address unless the instance carries the service (then
// its adverts list the VIP, as keepalived's virtual_ipaddress does, and it
// stays on lbd's link), and an address on lbd's dummy link.
func checkVRRPAddresses(cfg *Config, problem vrrpProblem, dummy string) {
	vips := map[netip.Addr]string{}
	for i := range cfg.Services {
		for _, a := range cfg.Services[i].VIPs {
			if _, ok := vips[a]; !ok {
				vips[a] = cfg.Services[i].Name
			}
		}
	}
	type owner struct {
		instance int
		key      string
	}
	owners := map[netip.Addr]owner{}
	for i := range cfg.VRRP {
		v := &cfg.VRRP[i]
		check := func(a VRRPAddress, key string, advertised bool) {
			addr := a.Prefix.Addr()
			name, isVIP := vips[addr]
			switch {
			case isVIP && advertised && !v.AllServices && !slices.Contains(v.Services, name):
				problem(&v.prov, v.Pos, key, "%s is a VIP of service %q, which this instance does not carry; a service's VIPs move with it, on lbd's link: expected %q in services too (the adverts then list the VIP, as keepalived's virtual_ipaddress)", addr, name, name)
			case isVIP && !advertised:
				problem(&v.prov, v.Pos, key, "%s is a VIP of service %q; a service's VIPs move with it, on lbd's link: expected services = [%q] rather than its VIP here", addr, name, name)
			}
			switch o, dup := owners[addr]; {
			case dup && o.instance == i: // within one list: refused where decoded
				problem(&v.prov, v.Pos, key, "%s is listed twice (also %s); expected each address once", addr, o.key)
			case dup:
				w := &cfg.VRRP[o.instance]
				problem(&v.prov, v.Pos, key, "%s is also an address of instance %q (at %s); expected each address in one instance", addr, w.Name, w.prov.at(o.key, w.Pos))
			default:
				owners[addr] = owner{i, key}
			}
			// An instance on the dummy link is refused as a whole.
			if dummy != "" && a.Interface == dummy && v.Interface != dummy {
				problem(&v.prov, v.Pos, key, "is on lbd's dummy link %q ([dataplane] interface), whose addresses are the services' VIPs; expected another dev, or the service in services", dummy)
			}
		}
		for j, a := range v.Addresses {
			check(a, v.addressKeys[j], true)
		}
		for j, a := range v.ExcludedAddresses {
			check(a, v.excludedKeys[j], false)
		}
	}
}

// checkSyncGroups refuses a repeated group name, an unknown instance, and
// an instance in two groups.
func checkSyncGroups(cfg *Config, problem vrrpProblem) {
	instances := map[string]bool{}
	for i := range cfg.VRRP {
		instances[cfg.VRRP[i].Name] = true
	}
	names := map[string]Pos{}
	type membership struct {
		group int
		key   string
	}
	members := map[string]membership{}
	for i := range cfg.VRRPSyncGroups {
		g := &cfg.VRRPSyncGroups[i]
		if p, dup := names[g.Name]; dup && g.Name != "" {
			problem(&g.prov, g.Pos, "name", "sync group name %q is already used by the group at %s; expected unique names", g.Name, p)
		} else if !dup {
			names[g.Name] = g.prov.at("name", g.Pos)
		}
		for j, name := range g.Instances {
			key := g.instanceKeys[j]
			m, dup := members[name]
			switch {
			case !instances[name]:
				problem(&g.prov, g.Pos, key, "no VRRP instance is named %q; expected the name of a [[vrrp]] instance", name)
			case dup:
				o := &cfg.VRRPSyncGroups[m.group]
				problem(&g.prov, g.Pos, key, "instance %q is already in sync group %q (at %s); expected each instance in one group at most", name, o.Name, o.prov.at(m.key, o.Pos))
			default:
				members[name] = membership{i, key}
			}
		}
	}
}

// checkNotifyPrograms checks each notify program of the instances and
// sync groups once, as the exec checks' programs are checked: a regular,
// executable file.
func (c *Config) checkNotifyPrograms(problem func(key string, fallback Pos, format string, args ...any)) {
	seen := map[string]bool{}
	check := func(path string, fallback Pos, n Notify) {
		for _, f := range n.notifyKeys() {
			prog := *f.dst
			if prog == "" || !filepath.IsAbs(prog) || seen[prog] {
				continue
			}
			seen[prog] = true
			key := path + "." + f.key
			if format, args := programProblem(prog, "the program lbd runs on a VRRP state change", "a program lbd may run"); format != "" {
				problem(key, fallback, format, args...)
			}
		}
	}
	for i := range c.VRRP {
		v := &c.VRRP[i]
		check(cmp.Or(v.prov.path, fmt.Sprintf("vrrp[%d]", i)), v.Pos, v.Notify)
	}
	for i := range c.VRRPSyncGroups {
		g := &c.VRRPSyncGroups[i]
		check(cmp.Or(g.prov.path, fmt.Sprintf("vrrp_sync_group[%d]", i)), g.Pos, g.Notify)
	}
}
