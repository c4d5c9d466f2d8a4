package consul

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

func TestWatcherFollowsRegistrationsAndHealth(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	w := New(testOptions(t, clientFor(t, agent, ""), nil))
	all := Query{Service: "web"}
	healthy := Query{Service: "web", PassingOnly: true}
	blue := Query{Service: "web", Tags: []string{"blue"}}
	absent := Query{Service: "nothing-here"}
	w.SetQueries([]Query{all, healthy, blue, absent})
	run(t, w)

	s := waitFor(t, w, "every query answered", func(s Snapshot) bool { return s.Synced })
	for _, q := range []Query{all, healthy, blue, absent} {
		if is, ok := s.Services[q.Key()]; !ok || len(is) != 0 {
			t.Errorf("before any registration: services[%s] = %v (present %v), want present and empty", q.Key(), is, ok)
		}
	}
	if !s.Connected || s.Err != "" {
		t.Errorf("connected=%v err=%q, want connected without error", s.Connected, s.Err)
	}

	register(t, c, reg{ID: "web1", Name: "web", Address: "10.0.0.1", Port: 80})
	waitFor(t, w, "web1 in all queries but the blue one", func(s Snapshot) bool {
		return has(s, all.Key(), "[web1@10.0.0.1:80(passing)]") &&
			has(s, healthy.Key(), "[web1@10.0.0.1:80(passing)]") &&
			has(s, blue.Key(), "[]")
	})

	// No service address: the node's address (the agent's, 127.0.0.1).
	register(t, c, reg{ID: "web2", Name: "web", Port: 8080, Tags: []string{"blue", "canary"}})
	waitFor(t, w, "web2 with its node's address, and in the blue query", func(s Snapshot) bool {
		return has(s, all.Key(), "[web1@10.0.0.1:80(passing) web2@127.0.0.1:8080(passing)]") &&
			has(s, blue.Key(), "[web2@127.0.0.1:8080(passing)]")
	})

	setCheck(t, c, "web1", api.HealthCritical)
	waitFor(t, w, "web1 critical, and gone from the passing-only query", func(s Snapshot) bool {
		return has(s, all.Key(), "[web1@10.0.0.1:80(critical) web2@127.0.0.1:8080(passing)]") &&
			has(s, healthy.Key(), "[web2@127.0.0.1:8080(passing)]")
	})
	setCheck(t, c, "web1", api.HealthWarning)
	waitFor(t, w, "web1 warning, still not passing", func(s Snapshot) bool {
		return has(s, all.Key(), "[web1@10.0.0.1:80(warning) web2@127.0.0.1:8080(passing)]") &&
			has(s, healthy.Key(), "[web2@127.0.0.1:8080(passing)]")
	})

	// A changed port moves the catalog's index but no check.
	register(t, c, reg{ID: "web2", Name: "web", Port: 9090, Tags: []string{"blue"}})
	waitFor(t, w, "web2's new port", func(s Snapshot) bool {
		return has(s, blue.Key(), "[web2@127.0.0.1:9090(passing)]")
	})

	// Emptied by a successful answer: delivered as such.
	deregister(t, c, "web1")
	deregister(t, c, "web2")
	s = waitFor(t, w, "web empty again", func(s Snapshot) bool { return has(s, all.Key(), "[]") })
	if !s.Connected || s.Err != "" {
		t.Errorf("connected=%v err=%q, want connected without error", s.Connected, s.Err)
	}

	st := w.Status()
	if !st.Connected || st.Queries != 4 || st.Requests == 0 || st.Errors != 0 || st.LastContact.IsZero() {
		t.Errorf("Status = %+v, want connected, 4 queries, requests and no errors", st)
	}
	if len(st.Datacenters) != 1 || st.Datacenters[0].CatalogIndex == 0 || st.Datacenters[0].ChecksIndex == 0 {
		t.Errorf("Status.Datacenters = %+v, want one with both indexes", st.Datacenters)
	}
}

func TestWatcherSetQueriesAddsAndDropsQueries(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, reg{ID: "a1", Name: "a", Address: "10.0.1.1", Port: 1})
	register(t, c, reg{ID: "b1", Name: "b", Address: "10.0.2.1", Port: 2})
	w := New(testOptions(t, clientFor(t, agent, ""), nil))
	a, b := Query{Service: "a"}, Query{Service: "b"}
	w.SetQueries([]Query{a})
	run(t, w)
	waitFor(t, w, "a", func(s Snapshot) bool { return has(s, a.Key(), "[a1@10.0.1.1:1(passing)]") && len(s.Services) == 1 })

	w.SetQueries([]Query{b})
	s := waitFor(t, w, "b instead of a", func(s Snapshot) bool { return has(s, b.Key(), "[b1@10.0.2.1:2(passing)]") })
	if _, ok := s.Services[a.Key()]; ok || !s.Synced {
		t.Errorf("after replacing a by b: %s want only b, synced", dump(s))
	}
}

func TestWatcherTaggedServicesAppearAndDisappear(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	opts := testOptions(t, clientFor(t, agent, ""), nil)
	opts.VirtualServiceTag = "lbd-vip"
	w := New(opts)
	run(t, w) // no queries at all: tag discovery alone

	s := waitFor(t, w, "catalog read", func(s Snapshot) bool { return s.Synced })
	if s.Tagged == nil || len(s.Tagged) != 0 {
		t.Errorf("before any tagged service: tagged = %v, want present and empty", s.Tagged)
	}

	register(t, c, reg{ID: "api1", Name: "api", Address: "10.1.0.1", Port: 443, Tags: []string{"lbd-vip"}, Meta: map[string]string{"lbd-vip": "192.0.2.10"}})
	register(t, c, reg{ID: "api2", Name: "api", Address: "10.1.0.2", Port: 443, Status: api.HealthCritical, Tags: []string{"lbd-vip"}})
	register(t, c, reg{ID: "db1", Name: "db", Address: "10.1.0.3", Port: 5432, Tags: []string{"primary"}})
	s = waitFor(t, w, "api tagged, in all health states", func(s Snapshot) bool {
		return instanceList(s.Tagged["api"]) == "[api1@10.1.0.1:443(passing) api2@10.1.0.2:443(critical)]"
	})
	if _, ok := s.Tagged["db"]; ok {
		t.Errorf("db carries no lbd-vip tag but is in Tagged")
	}
	if got := s.Tagged["api"][0].Meta["lbd-vip"]; got != "192.0.2.10" {
		t.Errorf("api1 meta lbd-vip = %q, want 192.0.2.10", got)
	}
	if !slices.Contains(s.Tagged["api"][0].Tags, "lbd-vip") {
		t.Errorf("api1 tags = %v, want lbd-vip among them", s.Tagged["api"][0].Tags)
	}

	deregister(t, c, "api1")
	deregister(t, c, "api2")
	waitFor(t, w, "api gone from Tagged", func(s Snapshot) bool {
		_, ok := s.Tagged["api"]
		return !ok && s.Tagged != nil
	})
}

func TestWatcherKeepsLastKnownWhileAgentIsDownAndFollowsAfterRestart(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	var logs logBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("watcher log:\n%s", logs.String())
		}
	})
	w := New(testOptions(t, clientFor(t, agent, ""), logs.logger()))
	web := Query{Service: "web"}
	w.SetQueries([]Query{web})
	run(t, w)
	register(t, agent.Client(""), reg{ID: "web1", Name: "web", Address: "10.0.0.1", Port: 80})
	waitFor(t, w, "web1", func(s Snapshot) bool { return has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") })

	agent.Stop()
	s := waitFor(t, w, "disconnected", func(s Snapshot) bool { return !s.Connected })
	if !has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") || s.Err == "" {
		t.Errorf("while the agent is down: %s want web1 kept and an error", dump(s))
	}
	if st := w.Status(); st.Connected || st.Errors == 0 || st.LastError == "" || st.LastErrorTime.IsZero() {
		t.Errorf("Status while down = %+v, want disconnected with errors", st)
	}

	agent.Restart()
	// The agent keeps the services registered through it in its data
	// directory and registers them again at start, their TTL checks
	// critical until updated: a real change, which must flow.
	s = waitFor(t, w, "connected again, web1 re-registered by the agent", func(s Snapshot) bool {
		return s.Connected && has(s, web.Key(), "[web1@10.0.0.1:80(critical)]")
	})
	if s.Err != "" {
		t.Errorf("after restart: err = %q, want none", s.Err)
	}
	register(t, agent.Client(""), reg{ID: "web3", Name: "web", Address: "10.0.0.3", Port: 80})
	inCatalog(t, agent, "web", "web3")
	waitFor(t, w, "web3 after the restart", func(s Snapshot) bool {
		return has(s, web.Key(), "[web1@10.0.0.1:80(critical) web3@10.0.0.3:80(passing)]")
	})

	// One line when contact was lost and one when it came back, however
	// many retries in between.
	out := logs.String()
	if n := strings.Count(out, "Consul requests failing; keeping the last known instances"); n != 1 {
		t.Errorf("logged %d lines about losing contact, want 1:\n%s", n, out)
	}
	if n := strings.Count(out, "Consul requests succeeding again"); n != 1 {
		t.Errorf("logged %d lines about contact coming back, want 1:\n%s", n, out)
	}
}

func TestWatcherDatacenters(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	register(t, agent.Client(""), reg{ID: "web1", Name: "web", Address: "10.0.0.1", Port: 80})
	cfg := consulConfig(t, agent, "")
	cfg.Datacenter = "dc1"
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w := New(testOptions(t, c, nil))
	implicit, explicit := Query{Service: "web"}, Query{Service: "web", Datacenter: "dc1", PassingOnly: true}
	w.SetQueries([]Query{implicit, explicit})
	run(t, w)
	waitFor(t, w, "both queries", func(s Snapshot) bool {
		return has(s, implicit.Key(), "[web1@10.0.0.1:80(passing)]") && has(s, explicit.Key(), "[web1@10.0.0.1:80(passing)]")
	})
	if dcs := w.Status().Datacenters; len(dcs) != 1 || dcs[0].Name != "dc1" {
		t.Errorf("Status.Datacenters = %+v, want dc1 once: the default and dc1 are one", dcs)
	}

	// A datacenter that does not exist fails on its own; the others go on.
	elsewhere := Query{Service: "web", Datacenter: "nowhere"}
	w.SetQueries([]Query{implicit, elsewhere})
	s := waitFor(t, w, "the unknown datacenter's error", func(s Snapshot) bool {
		return !s.Connected && strings.Contains(s.Err, "nowhere")
	})
	if !has(s, implicit.Key(), "[web1@10.0.0.1:80(passing)]") {
		t.Errorf("the default datacenter's query suffers: %s", dump(s))
	}
	if _, ok := s.Services[elsewhere.Key()]; ok || s.Synced {
		t.Errorf("the unknown datacenter's query is answered: %s", dump(s))
	}
}

// A node-level check concerns every instance on the node: node maintenance
// adds one, and moves neither the catalog's index nor any service check.
func TestWatcherFollowsNodeHealth(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	register(t, c, reg{ID: "web1", Name: "web", Address: "10.0.0.1", Port: 80})
	register(t, c, reg{ID: "db1", Name: "db", Address: "10.0.0.2", Port: 5432})
	w := New(testOptions(t, clientFor(t, agent, ""), nil))
	web, healthyDB := Query{Service: "web"}, Query{Service: "db", PassingOnly: true}
	w.SetQueries([]Query{web, healthyDB})
	run(t, w)
	waitFor(t, w, "both passing", func(s Snapshot) bool {
		return has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") && has(s, healthyDB.Key(), "[db1@10.0.0.2:5432(passing)]")
	})

	if err := c.Agent().EnableNodeMaintenance("test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "the node's instances critical", func(s Snapshot) bool {
		return has(s, web.Key(), "[web1@10.0.0.1:80(critical)]") && has(s, healthyDB.Key(), "[]")
	})
	if err := c.Agent().DisableNodeMaintenance(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "passing again", func(s Snapshot) bool {
		return has(s, web.Key(), "[web1@10.0.0.1:80(passing)]") && has(s, healthyDB.Key(), "[db1@10.0.0.2:5432(passing)]")
	})
}
