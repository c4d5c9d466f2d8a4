package consul

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// patience bounds every wait for Consul; tests never assert latencies.
const patience = 20 * time.Second

// testOptions are Options with retries short enough for tests that stop
// agents. A nil log logs to the test's log.
func testOptions(t *testing.T, c *Client, log *slog.Logger) Options {
	if log == nil {
		log = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return Options{
		Client:   c,
		Logger:   log,
		MinRetry: 100 * time.Millisecond,
		MaxRetry: time.Second,
	}
}

// clientFor returns a Client of agent a built by NewClient, with token
// written to a token file ("" for none).
func clientFor(t *testing.T, a *consultest.Agent, token string) *Client {
	t.Helper()
	c, err := NewClient(consulConfig(t, a, token))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

func consulConfig(t *testing.T, a *consultest.Agent, token string) config.Consul {
	cfg := config.Consul{Enabled: true, Address: a.Addr()}
	if token != "" {
		cfg.TokenFile = filepath.Join(t.TempDir(), "token")
		// Surrounding white space, as editors leave it, is trimmed.
		if err := os.WriteFile(cfg.TokenFile, []byte("  "+token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

// run starts w and stops it when the test ends, checking that Run returns
// nil and closes Updates.
func run(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
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
}

// waitFor reads snapshots until one satisfies ok and returns it; it fails
// the test with the latest snapshot after patience.
func waitFor(t *testing.T, w *Watcher, what string, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	timeout := time.After(patience)
	var last Snapshot
	for {
		select {
		case s, open := <-w.Updates():
			if !open {
				t.Fatalf("waiting for %s: Updates closed", what)
			}
			last = s
			if ok(s) {
				return s
			}
		case <-timeout:
			t.Fatalf("waiting for %s: not seen after %v; latest snapshot:\n%sstatus: %+v", what, patience, dump(last), w.Status())
		}
	}
}

// dump renders a snapshot for failure messages.
func dump(s Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  synced=%v connected=%v err=%q\n", s.Synced, s.Connected, s.Err)
	for _, k := range slices.Sorted(maps.Keys(s.Services)) {
		fmt.Fprintf(&b, "  services[%s] = %s\n", k, instanceList(s.Services[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Tagged)) {
		fmt.Fprintf(&b, "  tagged[%s] = %s\n", k, instanceList(s.Tagged[k]))
	}
	return b.String()
}

// instanceList renders instances as "id@addr:port(status)" in order.
func instanceList(is []Instance) string {
	parts := make([]string, len(is))
	for i, in := range is {
		parts[i] = fmt.Sprintf("%s@%s(%s)", in.ID, netip.AddrPortFrom(in.Address, in.Port), in.Status)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// has reports whether key is present in s.Services and its instances render
// as want (see instanceList).
func has(s Snapshot, key, want string) bool {
	is, ok := s.Services[key]
	return ok && instanceList(is) == want
}

// reg describes an instance registered through the agent, with one TTL
// check whose ID is "check:"+ID.
type reg struct {
	ID, Name string
	Address  string
	Port     int
	Tags     []string
	Meta     map[string]string
	Status   string // of the check; "" is passing
}

func register(t *testing.T, c *api.Client, r reg) {
	t.Helper()
	if r.Status == "" {
		r.Status = api.HealthPassing
	}
	err := c.Agent().ServiceRegisterOpts(&api.AgentServiceRegistration{
		ID: r.ID, Name: r.Name, Address: r.Address, Port: r.Port, Tags: r.Tags, Meta: r.Meta,
		Check: &api.AgentServiceCheck{CheckID: "check:" + r.ID, TTL: "10m", Status: r.Status},
	}, api.ServiceRegisterOpts{ReplaceExistingChecks: true})
	if err != nil {
		t.Fatalf("registering %s: %v", r.ID, err)
	}
}

// inCatalog waits until the agent has synced instance id of service to
// the catalog, so that a test waiting for the Watcher afterwards tells the
// Watcher's delays from the agent's.
func inCatalog(t *testing.T, agent *consultest.Agent, service, id string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		entries, _, err := agent.Client("").Catalog().Service(service, "", nil)
		if err == nil && slices.ContainsFunc(entries, func(e *api.CatalogService) bool { return e.ServiceID == id }) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not sync %s to the catalog within %v (last error %v)", id, patience, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func setCheck(t *testing.T, c *api.Client, id, status string) {
	t.Helper()
	if err := c.Agent().UpdateTTL("check:"+id, "set by test", status); err != nil {
		t.Fatalf("setting check of %s to %s: %v", id, status, err)
	}
}

func deregister(t *testing.T, c *api.Client, id string) {
	t.Helper()
	if err := c.Agent().ServiceDeregister(id); err != nil {
		t.Fatalf("deregistering %s: %v", id, err)
	}
}

// logBuffer collects a Logger's output for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// tWriter writes log lines to the test's log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
