package registrar

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// patience bounds every wait for Consul; tests never assert latencies.
const patience = 20 * time.Second

// start runs a Registrar for agent, with a TTL short enough that refreshes
// (every TTL/3) happen within a test, and stops it when the test ends.
func start(t *testing.T, agent *consultest.Agent) *Registrar {
	t.Helper()
	c, err := consul.NewClient(config.Consul{Address: agent.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Options{
		Client:   c,
		Logger:   slog.New(slog.NewTextHandler(tWriter{t}, nil)),
		TTL:      3 * time.Second,
		MinRetry: 100 * time.Millisecond,
		MaxRetry: 500 * time.Millisecond,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		case <-time.After(patience):
			t.Errorf("Run did not return after its context ended")
		}
	})
	return r
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// eventually polls cond until it returns "" and fails the test with its
// latest answer after patience.
func eventually(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		got := cond()
		if got == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: %s", what, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// inCatalog describes how the catalog holds service id of name: "absent",
// or "addr:port meta=... check=status output=..." with the lbd check's
// status from the catalog and its output from the agent: the agent sends
// an output-only change to the catalog only every check_update_interval
// (5 minutes by default), so the catalog's output may lag.
func inCatalog(t *testing.T, c *api.Client, name, id string) string {
	entries, _, err := c.Health().Service(name, "", false, nil)
	if err != nil {
		return "error: " + err.Error()
	}
	for _, e := range entries {
		if e.Service.ID != id {
			continue
		}
		desc := fmt.Sprintf("%s:%d meta=%s", e.Service.Address, e.Service.Port, e.Service.Meta[ManagedMeta])
		for _, ch := range e.Checks {
			if ch.CheckID != checkID(id) {
				continue
			}
			desc += " check=" + ch.Status
			checks, err := c.Agent().Checks()
			if err != nil {
				return "error: " + err.Error()
			}
			if local, ok := checks[checkID(id)]; ok {
				desc += fmt.Sprintf(" output=%q", local.Output)
			}
		}
		return desc
	}
	return "absent"
}

// want returns a condition for eventually: the catalog holds id as want.
func want(t *testing.T, c *api.Client, name, id, want string) func() string {
	return func() string {
		if got := inCatalog(t, c, name, id); got != want {
			return fmt.Sprintf("catalog has %s, want %s", got, want)
		}
		return ""
	}
}

func vip(id string, healthy bool, notes string) Registration {
	return Registration{
		ID: id, Name: "web-vip", Address: netip.MustParseAddr("192.0.2.10"), Port: 443,
		Tags: []string{"lbd"}, Meta: map[string]string{"lbd-service": "web"},
		Healthy: healthy, Notes: notes,
	}
}

func TestRegistrarRegistersUpdatesAndDeregisters(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	r := start(t, agent)

	r.Set([]Registration{vip("lbd-web-1", true, "3 of 3 real servers healthy")})
	eventually(t, "a passing registration", want(t, c, "web-vip", "lbd-web-1",
		`192.0.2.10:443 meta=true check=passing output="3 of 3 real servers healthy"`))
	eventually(t, "Status and Registrations", func() string {
		st, regs := r.Status(), r.Registrations()
		if st.Desired != 1 || st.Registered != 1 || st.Err != "" || st.LastSync.IsZero() ||
			len(regs) != 1 || !regs[0].Registered || regs[0].Error != "" || regs[0].ID != "lbd-web-1" {
			return fmt.Sprintf("Status = %+v, Registrations = %+v, want lbd-web-1 registered, no error", st, regs)
		}
		return ""
	})

	r.Set([]Registration{vip("lbd-web-1", false, "0 of 3 real servers healthy")})
	eventually(t, "the check critical", want(t, c, "web-vip", "lbd-web-1",
		`192.0.2.10:443 meta=true check=critical output="0 of 3 real servers healthy"`))

	// A changed port re-registers, keeping the ID.
	moved := vip("lbd-web-1", true, "1 of 3 real servers healthy")
	moved.Port = 8443
	r.Set([]Registration{moved})
	eventually(t, "the new port", want(t, c, "web-vip", "lbd-web-1",
		`192.0.2.10:8443 meta=true check=passing output="1 of 3 real servers healthy"`))

	r.Set(nil)
	eventually(t, "the registration gone", want(t, c, "web-vip", "lbd-web-1", "absent"))
	// Status follows when the round that removed it ends.
	eventually(t, "Status with nothing desired", func() string {
		if st := r.Status(); st.Desired != 0 || st.Registered != 0 || st.Err != "" {
			return fmt.Sprintf("Status = %+v, want nothing desired, no error", st)
		}
		return ""
	})
}

func TestRegistrarRemovesStaleRegistrationsOnlyAfterTheFirstSet(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	c := agent.Client("")
	// A previous run's registration, and one that is not lbd's.
	for _, reg := range []*api.AgentServiceRegistration{
		{ID: "lbd-old", Name: "web-vip", Port: 80, Meta: map[string]string{ManagedMeta: "true"}},
		{ID: "db-1", Name: "db", Port: 5432},
	} {
		if err := c.Agent().ServiceRegister(reg); err != nil {
			t.Fatal(err)
		}
	}

	r := start(t, agent)
	// Before its first Set, lbd does not know what it wants: it must not
	// remove anything.
	time.Sleep(300 * time.Millisecond)
	if got := inCatalog(t, c, "web-vip", "lbd-old"); got == "absent" {
		t.Fatalf("the previous run's registration was removed before the first Set")
	}

	r.Set([]Registration{vip("lbd-new", true, "ok")})
	eventually(t, "the new registration", want(t, c, "web-vip", "lbd-new", `192.0.2.10:443 meta=true check=passing output="ok"`))
	eventually(t, "the stale one removed", want(t, c, "web-vip", "lbd-old", "absent"))
	if got := inCatalog(t, c, "db", "db-1"); got != ":5432 meta=" {
		t.Errorf("a registration that is not lbd's: catalog has %s, want it untouched", got)
	}
}

func TestRegistrarRegistersAgainWhatTheAgentForgot(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	r := start(t, agent)
	r.Set([]Registration{vip("lbd-web-1", true, "ok")})
	passing := `192.0.2.10:443 meta=true check=passing output="ok"`
	eventually(t, "registered", want(t, agent.Client(""), "web-vip", "lbd-web-1", passing))

	// Removed behind lbd's back.
	if err := agent.Client("").Agent().ServiceDeregister("lbd-web-1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "registered again after removal", want(t, agent.Client(""), "web-vip", "lbd-web-1", passing))

	// The agent keeps its services in its data directory, but their TTL
	// checks come back critical: the next refresh must make it pass.
	agent.Restart()
	eventually(t, "passing after a restart", want(t, agent.Client(""), "web-vip", "lbd-web-1", passing))

	// An agent that lost its data directory: registered again.
	agent.RestartClean()
	eventually(t, "registered again after a clean restart", want(t, agent.Client(""), "web-vip", "lbd-web-1", passing))
}

func TestRegistrarReportsErrorsWhileTheAgentIsDown(t *testing.T) {
	t.Parallel()
	agent := consultest.Start(t, consultest.Options{})
	r := start(t, agent)
	r.Set([]Registration{vip("lbd-web-1", true, "ok")})
	eventually(t, "registered", func() string {
		if st := r.Status(); st.Registered != 1 {
			return fmt.Sprintf("status %+v", st)
		}
		return ""
	})

	agent.Stop()
	eventually(t, "the error reported", func() string {
		st, regs := r.Status(), r.Registrations()
		if st.Err == "" || st.LastErrorTime.IsZero() || st.Registered != 0 || len(regs) != 1 || regs[0].Error == "" {
			return fmt.Sprintf("status %+v, registrations %+v", st, regs)
		}
		return ""
	})

	agent.RestartClean()
	eventually(t, "registered again", want(t, agent.Client(""), "web-vip", "lbd-web-1", `192.0.2.10:443 meta=true check=passing output="ok"`))
	eventually(t, "no error any more", func() string {
		if st := r.Status(); st.Err != "" || st.Registered != 1 {
			return fmt.Sprintf("status %+v", st)
		}
		return ""
	})
}
