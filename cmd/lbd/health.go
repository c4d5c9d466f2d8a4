package main

import (
	"net/netip"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/status"
)

// probes lists the checks the configuration asks for: each real server of
// each service with its (possibly overridden) check, including the real
// servers discovery found.
func probes(cfg *config.Config, found merge.Result) []healthcheck.Probe {
	var out []healthcheck.Probe
	add := func(service string, rs []config.RealServer) {
		for _, r := range rs {
			// Unchecked real servers need no probe (and a probe copies
			// the check: 36 MB for 100,000 of them).
			if r.HealthCheck.Type == config.CheckNone {
				continue
			}
			out = append(out, healthcheck.Probe{Service: service, Addr: r.AddrPort(), Check: *r.HealthCheck})
		}
	}
	for _, s := range cfg.Services {
		add(s.Name, s.RealServers)
		add(s.Name, found.Reals[s.Name])
	}
	for _, s := range found.Services {
		add(s.Name, s.RealServers)
	}
	return out
}

// healthInput converts check results to the dataplane's input.
func healthInput(h map[healthcheck.Key]bool) map[desired.HealthKey]bool {
	out := make(map[desired.HealthKey]bool, len(h))
	for k, v := range h {
		out[desired.HealthKey{Service: k.Service, Addr: k.Addr}] = v
	}
	return out
}

// kernelServed returns the real servers the kernel already sends traffic
// to (weight > 0): they start healthy, so a restart never zeroes weights
// while checks warm up.
func kernelServed(k ipvs.Kernel) map[netip.AddrPort]bool {
	dump, err := k.Dump()
	if err != nil {
		return nil
	}
	out := map[netip.AddrPort]bool{}
	for _, s := range dump {
		for _, d := range s.Dests {
			if d.Weight > 0 {
				out[d.Addr] = true
			}
		}
	}
	return out
}

// conns indexes the kernel's connection counts for status.
func conns(dests map[desired.Key][]ipvs.Dest) map[string]map[string]status.Conns {
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
