package consul

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"web", `"web"`},
		{"", `""`},
		{strings.Repeat("a", MaxQuoted), `"` + strings.Repeat("a", MaxQuoted) + `"`},
		{strings.Repeat("a", MaxQuoted+1), `"` + strings.Repeat("a", MaxQuoted) + `"…(81 bytes)`},
		// A character across the cut is left out whole.
		{strings.Repeat("a", MaxQuoted-1) + "é" + "b", `"` + strings.Repeat("a", MaxQuoted-1) + `"…(82 bytes)`},
		{"a\nb\x00", `"a\nb\x00"`},
	}
	for _, tt := range tests {
		if got := Quote(tt.in); got != tt.want {
			t.Errorf("Quote(%.20q...) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// cappedClient is a Client of the agent at addr whose answers are capped
// at maxAll bytes (maxChecks for /v1/health/state/any).
func cappedClient(t *testing.T, cfg config.Consul, maxAll, maxChecks int64) *Client {
	t.Helper()
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.hc.Transport = capTransport{rt: c.hc.Transport.(capTransport).rt, max: answerCap(maxAll, maxChecks)}
	return c
}

// TestAnswerCap reads answers of several sizes through consul/api, from a
// server that streams them (no Content-Length, as Consul's large answers
// come) or announces them; an endless answer is read up to the cap only.
func TestAnswerCap(t *testing.T) {
	const limit = 64 << 10
	entry := `{"Node":{"Node":"n","Address":"10.0.0.1"},"Service":{"ID":"x","Service":"web","Port":80},"Checks":[]}`
	body := func(n int) string { // a JSON array of about n bytes
		k := max(1, n/(len(entry)+1))
		return "[" + strings.TrimSuffix(strings.Repeat(entry+",", k), ",") + "]"
	}
	tests := []struct {
		name    string
		body    string
		endless bool
		length  bool // send Content-Length
		tooBig  bool
	}{
		{"small", body(1000), false, false, false},
		{"just under", body(limit - 200), false, false, false},
		{"over, streamed", body(limit + 200), false, false, true},
		{"over, announced", body(limit + 200), false, true, true},
		{"endless", "", true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sent atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Consul-Index", "1")
				if tt.length {
					w.Header().Set("Content-Length", fmt.Sprint(len(tt.body)))
				}
				if !tt.endless {
					n, _ := w.Write([]byte(tt.body))
					sent.Add(int64(n))
					return
				}
				chunk := []byte("[" + strings.Repeat(entry+",", 100))
				// Endless as far as a cap of limit is concerned; finite so
				// that a missing cap fails the test rather than hangs it.
				for r.Context().Err() == nil && sent.Load() < 512*limit {
					n, err := w.Write(chunk)
					sent.Add(int64(n))
					if err != nil {
						return
					}
					chunk = []byte(strings.Repeat(entry+",", 100))
				}
			}))
			defer srv.Close()
			c := cappedClient(t, config.Consul{Address: strings.TrimPrefix(srv.URL, "http://")}, limit, limit)
			entries, _, err := c.Health().Service("web", "", false, nil)
			switch {
			case tt.tooBig && !errors.Is(err, errAnswerTooLarge):
				t.Errorf("%d entries, error %v; want the answer refused as too large", len(entries), err)
			case !tt.tooBig && err != nil:
				t.Errorf("error %v; want the answer read", err)
			}
			if tt.endless {
				t.Logf("the server wrote %d bytes of an endless answer capped at %d", sent.Load(), limit)
			}
			// Loopback socket buffers alone can hold megabytes (tcp_rmem
			// and tcp_wmem reach 6 and 4 MiB): bound well above them.
			if tt.endless && sent.Load() > 256*limit {
				t.Errorf("the server sent %d bytes before lbd stopped reading; want about %d (plus buffers)", sent.Load(), limit)
			}
		})
	}
}

// TestOversizedAnswerFromAgent: a real agent's answer past the cap makes
// that service's read fail, with a clear error, and the others stand.
func TestOversizedAnswerFromAgent(t *testing.T) {
	agent := consultest.Start(t, consultest.Options{})
	c := cappedClient(t, consulConfig(t, agent, ""), 16<<10, MaxChecksAnswer)
	meta := map[string]string{"pad": strings.Repeat("p", 500)}
	register(t, c.Client, reg{ID: "small-1", Name: "small", Address: "10.0.0.1", Port: 80})
	for i := range 20 {
		register(t, c.Client, reg{ID: fmt.Sprintf("big-%d", i), Name: "big", Address: fmt.Sprintf("10.0.1.%d", i+1), Port: 80, Meta: meta})
	}
	w := New(testOptions(t, c, nil))
	w.SetQueries([]Query{{Service: "small"}, {Service: "big"}})
	run(t, w)
	s := waitFor(t, w, "small read, big refused", func(s Snapshot) bool {
		return has(s, "small", "[small-1@10.0.0.1:80(passing)]") && strings.Contains(s.Err, `reading "big": answer from Consul larger than lbd reads: more than 16384 bytes`)
	})
	if _, ok := s.Services["big"]; ok {
		t.Errorf("big has instances %s; want none read", instanceList(s.Services["big"]))
	}
}

func TestRecoverAnswer(t *testing.T) {
	w := New(Options{Logger: testOptions(t, nil, nil).Logger})
	read := func(f func()) (err error) {
		defer w.recoverAnswer(`reading "web"`, &err)
		f()
		return nil
	}
	if err := read(func() {}); err != nil {
		t.Errorf("error %v, want none", err)
	}
	err := read(func() { var e *api.ServiceEntry; _ = e.Service })
	want := `reading "web": lbd failed on Consul's answer (panic: runtime error: invalid memory address or nil pointer dereference); it is ignored`
	if err == nil || err.Error() != want || !isAnswered(err) {
		t.Errorf("error %v; want %q, counted as an answer", err, want)
	}
}

// TestTaggedServicesCap: past maxTagged tagged services, the Watcher
// follows the first by name and says so.
func TestTaggedServicesCap(t *testing.T) {
	c, err := NewClient(config.Consul{})
	if err != nil {
		t.Fatal(err)
	}
	l := newLoop(New(Options{Client: c, VirtualServiceTag: "lbd"}))
	services := map[string][]string{"untagged": {"x"}}
	for i := range maxTagged + 2 {
		services[fmt.Sprintf("s%05d", i)] = []string{"lbd"}
	}
	l.updateTagged(services)
	_, problems := l.problems()
	want := `more than 8192 services carry tag "lbd"; lbd follows the first 8192 by name and ignores the others (from "s08192" on)`
	if len(l.tagged) != maxTagged || !l.tagged["s08191"] || l.tagged["s08192"] || len(problems) != 1 || problems[0] != want {
		t.Errorf("%d tagged services (s08191 %v, s08192 %v), problems %q; want %d and %q", len(l.tagged), l.tagged["s08191"], l.tagged["s08192"], problems, maxTagged, want)
	}
	delete(services, "s00000")
	delete(services, "s00001")
	l.updateTagged(services)
	if _, problems := l.problems(); len(l.tagged) != maxTagged || len(problems) != 0 {
		t.Errorf("%d tagged services, problems %q; want %d and none", len(l.tagged), problems, maxTagged)
	}
}
