package consul

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// fakeTriggers is an httptest Consul whose change triggers answer from a
// script, because a real agent cannot be made to send an index backwards
// or an index of 0 on demand. It records the index parameter of each
// request ("" when absent).
type fakeTriggers struct {
	mu      sync.Mutex
	script  map[string][]uint64 // per path: the index of each answer; then block
	indexes map[string][]string
}

func (f *fakeTriggers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	switch r.URL.Path {
	case "/v1/internal/acl/authorize":
		http.Error(w, "ACL support disabled", http.StatusUnauthorized)
		return
	case "/v1/health/service/web":
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, "[]")
		return
	}
	f.mu.Lock()
	f.indexes[r.URL.Path] = append(f.indexes[r.URL.Path], r.URL.Query().Get("index"))
	n := len(f.indexes[r.URL.Path])
	script := f.script[r.URL.Path]
	f.mu.Unlock()
	if n > len(script) {
		<-r.Context().Done() // nothing changes any more
		return
	}
	w.Header().Set("X-Consul-Index", fmt.Sprint(script[n-1]))
	if strings.HasPrefix(r.URL.Path, "/v1/catalog/") {
		fmt.Fprint(w, `{"web":[]}`)
	} else {
		fmt.Fprint(w, "[]")
	}
}

func (f *fakeTriggers) requests(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.indexes[path]...)
}

// Against an httptest server, not a real agent (see fakeTriggers).
func TestTriggerIndexBackwardsResetsAndZeroIsNeverAWaitIndex(t *testing.T) {
	t.Parallel()
	f := &fakeTriggers{
		script: map[string][]uint64{
			// 100, then backwards to 50: the answer is discarded and
			// read again without blocking, then waited on.
			"/v1/catalog/services": {100, 50, 50},
			// An index of 0 is waited on as 1.
			"/v1/health/state/any": {0},
		},
		indexes: map[string][]string{},
	}
	srv := httptest.NewServer(f)
	// Close waits for the blocked handlers: registered first, it runs
	// after the Watcher has stopped and cancelled their requests.
	t.Cleanup(srv.Close)
	c, err := NewClient(config.Consul{Address: strings.TrimPrefix(srv.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, c, nil)
	opts.MinInterval = time.Millisecond
	w := New(opts)
	w.SetQueries([]Query{{Service: "web"}})
	run(t, w)
	waitFor(t, w, "web answered", func(s Snapshot) bool { return has(s, "web", "[]") })

	want := map[string][]string{
		"/v1/catalog/services": {"", "100", "", "50"},
		"/v1/health/state/any": {"", "1"},
	}
	deadline := time.Now().Add(patience)
	for path, w := range want {
		for len(f.requests(path)) < len(w) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := f.requests(path); strings.Join(got, ",") != strings.Join(w, ",") {
			t.Errorf("%s: index parameters %q, want %q", path, got, w)
		}
	}
}

// Against an httptest server whose service reads never answer: a refresh
// that cannot reach the agent stops at the first timeout instead of
// waiting for one timeout after another.
func TestRefreshStopsAtTheFirstUnansweredRead(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	reads := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-LastContact", "0")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/health/service/"):
			mu.Lock()
			reads++
			mu.Unlock()
			<-r.Context().Done()
		case r.URL.Query().Get("index") != "":
			<-r.Context().Done() // nothing changes
		case r.URL.Path == "/v1/catalog/services":
			w.Header().Set("X-Consul-Index", "1")
			fmt.Fprint(w, "{}")
		default:
			w.Header().Set("X-Consul-Index", "1")
			fmt.Fprint(w, "[]")
		}
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(config.Consul{Address: strings.TrimPrefix(srv.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(t, c, nil)
	opts.RequestTimeout = 300 * time.Millisecond
	opts.MinRetry, opts.MaxRetry = time.Hour, time.Hour // one refresh only
	w := New(opts)
	var qs []Query
	for i := range 50 {
		qs = append(qs, Query{Service: fmt.Sprintf("svc-%d", i)})
	}
	w.SetQueries(qs)
	run(t, w)

	s := waitFor(t, w, "the refresh's failure", func(s Snapshot) bool { return strings.Contains(s.Err, "not done") })
	mu.Lock()
	n := reads
	mu.Unlock()
	if n > DefaultMaxConcurrency {
		t.Errorf("%d reads sent, want at most %d: the first wave's timeout should end the refresh", n, DefaultMaxConcurrency)
	}
	if s.Connected || len(s.Services) != 0 || strings.Contains(s.Err, "watching") {
		t.Errorf("after the failed refresh: %s want disconnected, nothing known, the triggers fine", dump(s))
	}
}
