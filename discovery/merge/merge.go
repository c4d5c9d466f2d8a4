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

// Input is what Compute merges.
type Input struct {
	Config   *config.Config
	Snapshot consul.Snapshot
	// HostAddrs are every address of the box, on every interface but
	// lbd's dummy one (hostaddrs.List, kept current by hostaddrs.Follow):
	// no real server from Consul may have one, or a registration could
	// point a VIP at the director's own sockets (its sshd), which lbd's
	// INPUT rule accepts ahead of the host firewall. Merge again when they
	// change. Nil refuses none of them: only for callers that never
	// program the kernel.
	HostAddrs []netip.Addr
}

// Compute computes the discovered input. Every real server from Consul is
// checked against a forbidden set (the box's addresses, every VIP,
// loopback, link-local, multicast, broadcast and unspecified addresses,
// in IPv4-mapped form too) and, when set, [consul.virtual_services]
// real_server_networks; what is refused, capped or cannot be decoded is a
// Problem, and the rest stands.
func Compute(in Input) Result {
	cfg := in.Config
	r := Result{Reals: map[string][]config.RealServer{}}
	g := newGuard(cfg, in.HostAddrs)
	var defined []definedService
	if cfg.Consul.VirtualServices.Tag != "" {
		// First, so that their VIPs are forbidden to every real server.
		defined = r.virtualServices(cfg, in.Snapshot.Tagged, g)
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Consul == nil {
			continue
		}
		insts, ok := in.Snapshot.Services[query(s.Consul).Key()]
		if !ok {
			continue
		}
		r.safely(serviceSubject(s.Consul.Service), func() {
			if reals := r.reals(s, insts, g); len(reals) > 0 {
				r.Reals[s.Name] = reals
			}
		})
	}
	for _, d := range defined {
		if r.safely(serviceSubject(d.s.Name), func() { d.s.RealServers = r.reals(&d.s, d.insts, g) }) {
			r.Services = append(r.Services, d.s)
		}
	}
	slices.SortFunc(r.Problems, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Subject, b.Subject), strings.Compare(a.Msg, b.Msg))
	})
	r.Problems = slices.Compact(r.Problems)
	return r
}

func (r *Result) problem(subject, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Subject: subject, Msg: clip(fmt.Sprintf(format, args...), maxMsg)})
}

// reals converts the instances of s's Consul service into real servers.
func (r *Result) reals(s *config.Service, insts []consul.Instance, g *guard) []config.RealServer {
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
	if len(insts) > maxInstances {
		// The oldest registrations keep their place, whatever the order.
		insts = slices.Clone(insts)
		slices.SortStableFunc(insts, func(a, b consul.Instance) int {
			return cmp.Or(cmp.Compare(a.CreateIndex, b.CreateIndex), strings.Compare(a.Node, b.Node), strings.Compare(a.ID, b.ID))
		})
	}
	var out []config.RealServer
	seen := map[netip.AddrPort]bool{}
	for _, in := range insts {
		rs, ok := r.real(s, in, g)
		if !ok {
			continue
		}
		ap := rs.AddrPort()
		if static[ap] || seen[ap] {
			continue // the file's real server (or the first instance) stands
		}
		if len(out) == maxInstances {
			r.problem(serviceSubject(c.Service), "more than %d usable instances; the %d oldest registrations serve, the newer ones are refused", maxInstances, maxInstances)
			break
		}
		seen[ap] = true
		rs.HealthCheck = check
		out = append(out, rs)
	}
	slices.SortFunc(out, func(a, b config.RealServer) int { return a.AddrPort().Compare(b.AddrPort()) })
	return out
}

// real converts one instance of s's Consul service, or reports why not.
func (r *Result) real(s *config.Service, in consul.Instance, g *guard) (config.RealServer, bool) {
	c := s.Consul
	subject := instanceSubject(c.Service, in)
	a := canon(in.Address)
	port := in.Port
	if c.Port != 0 {
		port = c.Port
	}
	if why := g.check(a); why != allowed {
		r.problem(subject, "%s", g.why(why, a))
		return config.RealServer{}, false
	}
	switch {
	case port == 0:
		r.problem(subject, "registered without a port and [service.consul] of %s sets none; expected a port in the registration or port = N", consul.Quote(s.Name))
		return config.RealServer{}, false
	case familyOf(a) != s.Family():
		r.problem(subject, "%s is IPv%d but service %s is IPv%d; IPVS cannot forward across families", a, familyOf(a), consul.Quote(s.Name), s.Family())
		return config.RealServer{}, false
	}
	weight := c.DefaultWeight
	if v, ok := in.Meta[c.WeightMeta]; ok {
		w, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil && !errors.Is(err, strconv.ErrRange):
			r.problem(subject, "meta %s = %s is not a weight; expected an integer 0..%d (using the default weight %d)", c.WeightMeta, consul.Quote(v), maxWeight, c.DefaultWeight)
		case err != nil || w < 0 || w > maxWeight:
			r.problem(subject, "meta %s = %s is out of range; expected a weight 0..%d, and the instance is refused rather than given another weight", c.WeightMeta, consul.Quote(v), maxWeight)
			return config.RealServer{}, false
		default:
			weight = w
		}
	}
	return config.RealServer{
		Address: a, Port: port, Weight: weight,
		// As its service forwards: DR and tunnels set Port to the
		// service's (config), since they cannot map ports.
		Forward: s.Forward,
		Down:    down(in.Status, c.PassingOnly),
		Pos:     config.Pos{File: clip(fmt.Sprintf("consul %s/%s", in.Node, in.ID), 2*consul.MaxQuoted)},
	}, true
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
