package healthcheck

// Real servers' health: how check results change it (rise and fall), and
// what the dataplane and status pages see of it.

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

// record applies one result: rise consecutive successes make a real
// server healthy, fall consecutive failures unhealthy. m.mu is held.
func (m *Manager) record(c *check, at time.Time, took time.Duration, err error) {
	c.lastCheck, c.lastDuration, c.lastErr = at, took, ""
	if err != nil {
		c.lastErr = resultText(err)
		c.failures++
		c.successes = 0
	} else {
		c.successes++
		c.failures = 0
	}
	switch {
	case !c.healthy && c.successes >= c.hc.Rise:
		c.healthy, c.since = true, at
		m.opts.Logger.Info("real server up", "target", c.id.target, "check", c.hc.Type, "services", services(c))
	case c.healthy && c.failures >= c.hc.Fall:
		c.healthy, c.since = false, at
		m.opts.Logger.Warn("real server down", "target", c.id.target, "check", c.hc.Type, "services", services(c), "error", c.lastErr)
	default:
		return
	}
	m.poke()
}

// services names the services of c's real servers, once each.
func services(c *check) []string {
	var out []string
	for _, k := range c.keys {
		out = append(out, k.Service)
	}
	return slices.Compact(out) // keys are sorted
}

// Health returns every checked real server's health.
func (m *Manager) Health() map[lvs.HealthKey]bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[lvs.HealthKey]bool{}
	for _, c := range m.checks {
		for _, k := range c.keys {
			out[k] = c.healthy
		}
	}
	return out
}

// Status returns every check's state, sorted by target.
func (m *Manager) Status() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Status
	for _, id := range slices.SortedFunc(maps.Keys(m.checks), func(a, b checkID) int {
		if c := a.target.Compare(b.target); c != 0 {
			return c
		}
		return cmp.Compare(a.def, b.def)
	}) {
		out = append(out, statusOf(m.checks[id]))
	}
	return out
}

// ByKey returns the status of the check of every real server of every
// service, for status pages that list real servers per service.
func (m *Manager) ByKey() map[lvs.HealthKey]Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[lvs.HealthKey]Status{}
	for _, c := range m.checks {
		st := statusOf(c)
		for _, k := range c.keys {
			out[k] = st
		}
	}
	return out
}

// statusOf describes c; Manager.mu is held.
func statusOf(c *check) Status {
	return Status{
		Target: c.id.target, Type: c.hc.Type, Services: services(c), Healthy: c.healthy, Since: c.since,
		LastCheck: c.lastCheck, LastError: c.lastErr, Duration: c.lastDuration,
	}
}
