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
// trigger request ("" when absent).
type fakeTriggers struct {
	// script holds, per path, the index of each answer; block, and any
	// request after the script, waits until cancelled.
	script map[string][]uint64
	// hold, when set, is called before answering the n-th request (from
	// 1) of path.
	hold func(path string, n int)
	// readWeb, when set, answers the reads of web instead.
	readWeb http.HandlerFunc

	mu      sync.Mutex
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
		if f.readWeb != nil {
			f.readWeb(w, r)
			return
		}
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, "[]")
		return
	}
	f.mu.Lock()
	if f.indexes == nil {
		f.indexes = map[string][]string{}
	}
	f.indexes[r.URL.Path] = append(f.indexes[r.URL.Path], r.URL.Query().Get("index"))
	n := len(f.indexes[r.URL.Path])
	script := f.script[r.URL.Path]
	f.mu.Unlock()
	if f.hold != nil {
		f.hold(r.URL.Path, n)
	}
	if n > len(script) || script[n-1] == block {
		<-r.Context().Done() // nothing changes
		return
	}
	w.Header().Set("X-Consul-Index", fmt.Sprint(script[n-1]))
	if strings.HasPrefix(r.URL.Path, "/v1/catalog/") {
		fmt.Fprint(w, `{"web":[]}`)
	} else {
		fmt.Fprint(w, "[]")
	}
}

// block in a fakeTriggers script is an answer that never comes.
const block = ^uint64(0)

func (f *fakeTriggers) requests(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.indexes[path]...)
}

// waitRequests waits until f has seen want's requests on path, then
// compares their index parameters.
func (f *fakeTriggers) waitRequests(t *testing.T, path string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for len(f.requests(path)) < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.requests(path); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: index parameters %q, want %q", path, got, want)
	}
}

// waitPrefix is waitRequests for the first requests only.
func (f *fakeTriggers) waitPrefix(t *testing.T, path string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for len(f.requests(path)) < len(want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := f.requests(path)
	if len(got) > len(want) {
		got = got[:len(want)]
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("%s: index parameters start %q, want %q", path, got, want)
	}
}

// follow runs a Watcher of "web" against f.
func follow(t *testing.T, f *fakeTriggers) {
	t.Helper()
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
}

// Against an httptest server (see fakeTriggers).
func TestTriggerIndexGoingBackwardsResetsBothTriggers(t *testing.T) {
	t.Parallel()
	f := &fakeTriggers{script: map[string][]uint64{
		// 100, then backwards to 50: the answer is discarded and read
		// again without blocking, then waited on.
		"/v1/catalog/services": {100, 50, 50},
		"/v1/health/state/any": {100, block, 100},
	}}
	blocking := make(chan struct{})
	f.hold = func(path string, n int) {
		switch {
		case path == "/v1/health/state/any" && n == 2:
			close(blocking)
		case path == "/v1/catalog/services" && n == 2:
			<-blocking // go backwards once the other trigger waits on 100
		}
	}
	follow(t, f)
	f.waitRequests(t, "/v1/catalog/services", "", "100", "", "50")
	// The other trigger's long-poll on 100 is cut short: it reads again
	// without blocking, then waits on what it finds.
	f.waitRequests(t, "/v1/health/state/any", "", "100", "", "100")
}

// Against an httptest server (see fakeTriggers): a read that gets no
// answer means the agent may have gone and come back, unseen by triggers
// that were between two long-polls; they must read again, not wait on
// their old index.
func TestUnansweredReadResetsTheTriggers(t *testing.T) {
	t.Parallel()
	f := &fakeTriggers{script: map[string][]uint64{
		"/v1/catalog/services": {5, block, 5},
		"/v1/health/state/any": {5, block, 5},
	}}
	f.readWeb = func(w http.ResponseWriter, r *http.Request) {
		// Once both triggers wait on 5, drop the connection (net/http
		// retries a request on a dropped reused connection: drop every
		// read until the triggers have read again).
		for len(f.requests("/v1/catalog/services")) < 2 || len(f.requests("/v1/health/state/any")) < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		if len(f.requests("/v1/catalog/services")) < 3 || len(f.requests("/v1/health/state/any")) < 3 {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("X-Consul-LastContact", "0")
		w.Header().Set("X-Consul-Index", "1")
		fmt.Fprint(w, "[]")
	}
	follow(t, f)
	// Each waits on 5, is cut short, reads without blocking (and may be
	// cut short again by another dropped read).
	for _, path := range []string{"/v1/catalog/services", "/v1/health/state/any"} {
		f.waitPrefix(t, path, "", "5", "")
	}
}

// Against an httptest server (see fakeTriggers).
func TestTriggerIndexZeroIsNeverAWaitIndex(t *testing.T) {
	t.Parallel()
	f := &fakeTriggers{script: map[string][]uint64{
		"/v1/catalog/services": {7},
		"/v1/health/state/any": {0},
	}}
	follow(t, f)
	f.waitRequests(t, "/v1/catalog/services", "", "7")
	f.waitRequests(t, "/v1/health/state/any", "", "1")
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
