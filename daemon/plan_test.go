package daemon

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/healthcheck"
)

func parseConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// weights lists the destinations of the state's one virtual server as
// "addr=weight".
func weights(t *testing.T, cfg *config.Config, snap consul.Snapshot, seed healthcheck.Seed) []string {
	t.Helper()
	first := firstSync(slog.New(slog.DiscardHandler), cfg, nil, snap, seed)
	st := desired.Compute(desired.Input{Config: cfg, Discovered: first.Sources.Reals, DiscoveredServices: first.Sources.Services, Health: first.Health})
	if len(st.Services) != 1 {
		t.Fatalf("%d virtual servers, want 1: %+v", len(st.Services), st.Services)
	}
	var out []string
	for _, d := range st.Services[0].Dests {
		out = append(out, fmt.Sprintf("%s=%d", d.Addr, d.Weight))
	}
	return out
}

const seededService = `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
on_unhealthy = "drain"
quorum_fallback = "healthy"
[service.health_check]
type = "tcp"
initial_state = "healthy"
[[service.real_server]]
address = "10.0.0.1"
weight = 3
[[service.real_server]]
address = "10.0.0.2"
weight = 2
[[service.real_server]]
address = "10.0.0.3"
weight = 4
  [service.real_server.health_check]
  initial_state = "unhealthy"
[[service.real_server]]
address = "10.0.0.4"
weight = 5
`

// The diff shows the weights the first sync after a restart would write:
// health seeded from the kernel, not the checks' initial states.
func TestDiffStateSeedsHealth(t *testing.T) {
	cfg := parseConfig(t, seededService)
	tests := []struct {
		name string
		seed healthcheck.Seed
		want []string
	}{
		{
			name: "no seed: initial states",
			want: []string{"10.0.0.1:80=3", "10.0.0.2:80=2", "10.0.0.3:80=0", "10.0.0.4:80=5"},
		},
		{
			name: "served, held at 0, served despite initial_state unhealthy, unknown",
			seed: healthcheck.Seed{
				netip.MustParseAddrPort("10.0.0.1:80"): healthcheck.SeedServed,
				netip.MustParseAddrPort("10.0.0.2:80"): healthcheck.SeedHeld,
				netip.MustParseAddrPort("10.0.0.3:80"): healthcheck.SeedServed,
			},
			want: []string{"10.0.0.1:80=3", "10.0.0.2:80=0", "10.0.0.3:80=4", "10.0.0.4:80=5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := weights(t, cfg, consul.Snapshot{}, tt.seed); !slices.Equal(got, tt.want) {
				t.Errorf("destinations %v, want %v", got, tt.want)
			}
		})
	}
}

// fakeConsul answers the reads of service web with entries, and each
// change trigger once; a trigger's long-poll (with an index) waits until
// cancelled, as nothing changes. With hang, nothing is answered at all.
func fakeConsul(t *testing.T, entries string, hang bool) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang {
			<-r.Context().Done()
			return
		}
		w.Header().Set("X-Consul-KnownLeader", "true")
		w.Header().Set("X-Consul-LastContact", "0")
		switch {
		case r.URL.Path == "/v1/internal/acl/authorize":
			http.Error(w, "ACL support disabled", http.StatusUnauthorized)
			return
		case r.URL.Path == "/v1/health/service/web":
			w.Header().Set("X-Consul-Index", "7")
			fmt.Fprint(w, entries)
			return
		case r.URL.Query().Get("index") != "":
			<-r.Context().Done()
			return
		}
		w.Header().Set("X-Consul-Index", "7")
		if strings.HasPrefix(r.URL.Path, "/v1/catalog/") {
			fmt.Fprint(w, `{"web":[]}`)
		} else {
			fmt.Fprint(w, "[]")
		}
	}))
	// Close waits for the blocked handlers, which end once readConsul has
	// stopped its Watcher.
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

const consulService = `
[consul]
address = "%s"
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
[[service.real_server]]
address = "10.0.0.1"
[service.consul]
service = "web"
`

func TestReadConsulFeedsTheDiff(t *testing.T) {
	entries := `[{"Node":{"Node":"n1","Address":"10.0.0.50"},"Service":{"ID":"web-1","Service":"web","Address":"10.0.0.7","Port":8080,"Meta":{"lbd-weight":"4"},"CreateIndex":3},"Checks":[{"Status":"passing"}]}]`
	cfg := parseConfig(t, fmt.Sprintf(consulService, fakeConsul(t, entries, false)))
	snap, err := readConsul(t.Context(), slog.New(slog.DiscardHandler), cfg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Synced {
		t.Fatalf("snapshot not synced: %+v", snap)
	}
	// As apply merges it: the file's real server and Consul's.
	if got, want := weights(t, cfg, snap, nil), []string{"10.0.0.1:80=1", "10.0.0.7:8080=4"}; !slices.Equal(got, want) {
		t.Errorf("destinations %v, want %v", got, want)
	}
}

func TestReadConsulTimesOut(t *testing.T) {
	cfg := parseConfig(t, fmt.Sprintf(consulService, fakeConsul(t, "", true)))
	start := time.Now()
	_, err := readConsul(t.Context(), slog.New(slog.DiscardHandler), cfg, 300*time.Millisecond)
	if err == nil {
		t.Fatal("no error from a Consul that does not answer")
	}
	for _, want := range []string{"did not answer within 300ms", "as a removal"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	t.Log(err)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("gave up after %v; want about 300ms", took)
	}
}
