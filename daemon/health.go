package daemon

import (
	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/lvs"
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

// kernelSeed carries health across a restart as the kernel shows it: a
// real server some owned virtual server gives a weight is served (its
// check starts healthy, so a restart zeroes no weight while checks warm
// up); one present only at weight 0 is held there (its check starts
// unhealthy, so a restart does not send traffic to a real server a failing
// check held out). Only owned virtual servers count: others' weights say
// nothing of lbd's checks. A real server configured with weight 0, or
// draining, is at weight 0 too and so starts unhealthy: it then needs rise
// successes to count as healthy, which is acceptable as it gets no traffic
// either way. Never nil, so that the caller can tell a seed was read.
func kernelSeed(owned []ipvs.Service) healthcheck.Seed {
	out := healthcheck.Seed{}
	for _, s := range owned {
		for _, d := range s.Dests {
			switch {
			case d.Weight > 0:
				out[d.Addr] = healthcheck.SeedServed
			case out[d.Addr] == healthcheck.SeedNone:
				out[d.Addr] = healthcheck.SeedHeld
			}
		}
	}
	return out
}

// firstHealth is the health the first sync of a freshly (re)started lbd
// uses: every check new, seeded from the kernel, none run yet.
func firstHealth(cfg *config.Config, found merge.Result, seed healthcheck.Seed) map[lvs.HealthKey]bool {
	// A Manager that is not running runs no check: Set only sets states.
	m := healthcheck.New(healthcheck.Options{})
	m.Set(probes(cfg, found), seed)
	return m.Health()
}
