// Package merge turns what Consul reports into lbd's discovered input: real
// servers for the file services that follow a Consul service, and virtual
// services that Consul registrations define. Files win every conflict;
// every registration lbd cannot use is reported, and never affects the
// others.
package merge

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul"
)

// Result is the discovered input for the dataplane and the health checker.
type Result struct {
	// Reals holds the Consul real servers of file services, by name.
	Reals map[string][]config.RealServer
	// Services are the Consul-defined virtual services, with their real
	// servers, in the order they claimed their VIPs.
	Services []config.Service
	// Problems lists what was refused and why, sorted.
	Problems []Problem
}

// Problem is one registration lbd could not use.
type Problem struct {
	Subject string // such as consul service "api"
	Msg     string
}

func (p Problem) String() string { return p.Subject + ": " + p.Msg }

// Queries returns what the configuration asks Consul for: the Consul
// service of each file service. Every instance is asked for, whatever its
// health, so that on_unhealthy (drain or remove) applies to them too.
func Queries(cfg *config.Config) []consul.Query {
	var qs []consul.Query
	for i := range cfg.Services {
		if c := cfg.Services[i].Consul; c != nil {
			qs = append(qs, query(c))
		}
	}
	return qs
}

// query leaves the datacenter empty unless the service names one: the
// client's default ([consul] datacenter, else the agent's) then applies.
func query(c *config.ConsulService) consul.Query {
	return consul.Query{Service: c.Service, Tags: c.Tags, Datacenter: c.Datacenter}
}

// Merge computes the discovered input from cfg and Consul's snapshot.
func Merge(cfg *config.Config, snap consul.Snapshot) Result {
	r := Result{Reals: map[string][]config.RealServer{}}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Consul == nil {
			continue
		}
		insts, ok := snap.Services[query(s.Consul).Key()]
		if !ok {
			continue
		}
		if reals := r.reals(s, insts); len(reals) > 0 {
			r.Reals[s.Name] = reals
		}
	}
	if cfg.Consul.VirtualServices.Tag != "" {
		r.virtualServices(cfg, snap.Tagged)
	}
	slices.SortFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Subject, b.Subject), strings.Compare(a.Msg, b.Msg))
	})
	return r
}

func (r *Result) problem(subject, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Subject: subject, Msg: fmt.Sprintf(format, args...)})
}

// reals converts the instances of s's Consul service into real servers.
func (r *Result) reals(s *config.Service, insts []consul.Instance) []config.RealServer {
	c := s.Consul
	// One check for all the instances, shared: see config.RealServer.
	check := &config.HealthCheck{Type: config.CheckNone}
	if c.OwnChecks && s.HealthCheck != nil {
		check = s.HealthCheck
	}
	static := map[netip.AddrPort]bool{}
	for _, rs := range s.RealServers {
		static[rs.AddrPort()] = true
	}
	var out []config.RealServer
	seen := map[netip.AddrPort]bool{}
	for _, in := range insts {
		subject := fmt.Sprintf("consul service %q instance %s on node %s", c.Service, in.ID, in.Node)
		a := in.Address.Unmap()
		port := in.Port
		if c.Port != 0 {
			port = c.Port
		}
		switch {
		case !a.IsValid() || !a.IsGlobalUnicast() || a.IsLinkLocalUnicast():
			r.problem(subject, "address %s is not a routable unicast address; IPVS NAT cannot forward to it", in.Address)
			continue
		case port == 0:
			r.problem(subject, "registered without a port and [service.consul] of %q sets none; expected a port in the registration or port = N", s.Name)
			continue
		case familyOf(a) != s.Family():
			r.problem(subject, "%s is IPv%d but service %q is IPv%d; IPVS NAT cannot mix families", a, familyOf(a), s.Name, s.Family())
			continue
		case slices.Contains(s.VIPs, a):
			r.problem(subject, "%s is a VIP of service %q; a real server cannot be its own VIP", a, s.Name)
			continue
		}
		ap := netip.AddrPortFrom(a, port)
		if static[ap] || seen[ap] {
			continue // the file's real server (or the first instance) stands
		}
		seen[ap] = true
		weight := c.DefaultWeight
		if v, ok := in.Meta[c.WeightMeta]; ok {
			w, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || w < 0 || w > 65535 {
				r.problem(subject, "meta %s = %q is not a weight; expected an integer 0..65535 (using the default weight %d)", c.WeightMeta, v, c.DefaultWeight)
			} else {
				weight = w
			}
		}
		out = append(out, config.RealServer{
			Address: a, Port: port, Weight: weight, HealthCheck: check,
			Down: down(in.Status, c.PassingOnly),
			Pos:  config.Pos{File: fmt.Sprintf("consul %s/%s", in.Node, in.ID)},
		})
	}
	slices.SortFunc(out, func(a, b config.RealServer) int { return a.AddrPort().Compare(b.AddrPort()) })
	return out
}

// down says whether Consul's health takes the instance out: anything but
// passing with passing_only, else only critical.
func down(status string, passingOnly bool) bool {
	if passingOnly {
		return status != consul.Passing
	}
	return status == consul.Critical
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// virtualServices adds the services that tagged Consul services define.
// The oldest registration wins a VIP:port claimed twice; files always win.
func (r *Result) virtualServices(cfg *config.Config, tagged map[string][]consul.Instance) {
	tag := cfg.Consul.VirtualServices.Tag
	type claim struct{ owner, where string }
	claims := map[string]claim{}
	names := map[string]bool{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		names[s.Name] = true
		for _, k := range claimKeys(s) {
			claims[k] = claim{fmt.Sprintf("service %q", s.Name), s.Pos.String()}
		}
	}
	type candidate struct {
		name  string
		insts []consul.Instance
		first uint64
	}
	var cands []candidate
	for _, name := range slices.Sorted(maps.Keys(tagged)) {
		// Only the instances carrying the tag define and serve the service.
		insts := slices.DeleteFunc(slices.Clone(tagged[name]), func(in consul.Instance) bool { return !slices.Contains(in.Tags, tag) })
		if len(insts) == 0 {
			continue
		}
		slices.SortFunc(insts, func(a, b consul.Instance) int {
			return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), strings.Compare(a.ID, b.ID))
		})
		cands = append(cands, candidate{name, insts, insts[0].CreateIndex})
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(a.first, b.first) })

	for _, c := range cands {
		subject := fmt.Sprintf("consul service %q", c.name)
		def := c.insts[0]
		for _, in := range c.insts[1:] {
			if !sameDefinition(def.Meta, in.Meta) {
				r.problem(subject, "instance %s on node %s defines the virtual service differently from the oldest registration (%s on node %s), whose lbd-* meta is used", in.ID, in.Node, def.ID, def.Node)
			}
		}
		if names[c.name] {
			r.problem(subject, "a file service is already named %q; the file wins", c.name)
			continue
		}
		s, err := config.ServiceFromConsul(cfg, c.name, def.Meta)
		if err != nil {
			var list config.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					r.problem(subject, "%s", strings.TrimPrefix(e.Error(), subject+": "))
				}
			} else {
				r.problem(subject, "%v", err)
			}
			continue
		}
		conflict := false
		for _, k := range claimKeys(&s) {
			if cl, taken := claims[k]; taken {
				r.problem(subject, "%s is already claimed by %s (%s); it keeps it", k, cl.owner, cl.where)
				conflict = true
			}
		}
		if conflict {
			continue
		}
		for _, k := range claimKeys(&s) {
			claims[k] = claim{subject, fmt.Sprintf("registered by %s on node %s", def.ID, def.Node)}
		}
		names[c.name] = true
		s.RealServers = r.reals(&s, c.insts)
		r.Services = append(r.Services, s)
	}
}

func claimKeys(s *config.Service) []string {
	out := make([]string, 0, len(s.VIPs))
	for _, v := range s.VIPs {
		out = append(out, fmt.Sprintf("%s/%s", netip.AddrPortFrom(v, s.Port), s.Protocol))
	}
	return out
}

// sameDefinition compares the lbd-* meta that defines a virtual service
// (the weight is per instance).
func sameDefinition(a, b map[string]string) bool {
	def := func(m map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			if strings.HasPrefix(k, "lbd-") && k != config.ConsulWeightMeta {
				out[k] = v
			}
		}
		return out
	}
	return maps.Equal(def(a), def(b))
}
