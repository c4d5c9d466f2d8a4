package consul

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// connCounter dials TCP and tracks how many connections are open at once.
type connCounter struct {
	mu        sync.Mutex
	open, max int
	dialed    int
}

func (c *connCounter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.open++
	c.dialed++
	c.max = max(c.max, c.open)
	c.mu.Unlock()
	return &countedConn{Conn: conn, c: c}, nil
}

func (c *connCounter) stats() (maxOpen, dialed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.max, c.dialed
}

type countedConn struct {
	net.Conn
	c    *connCounter
	once sync.Once
}

func (cc *countedConn) Close() error {
	cc.once.Do(func() {
		cc.c.mu.Lock()
		cc.c.open--
		cc.c.mu.Unlock()
	})
	return cc.Conn.Close()
}

// One long-poll per service would need 300 connections; the agent here
// refuses more than 20 from one address.
func TestWatcherFollows300ServicesWithin20ConnectionsPerClient(t *testing.T) {
	t.Parallel()
	const n = 300
	agent := consultest.Start(t, consultest.Options{HCL: "limits { http_max_conns_per_client = 20 }"})
	c := agent.Client("")
	name := func(i int) string { return fmt.Sprintf("svc-%03d", i) }
	// Straight into the catalog, on a node of their own: the agent's
	// anti-entropy leaves other nodes alone, and one request each keeps
	// the setup quick.
	for i := range n {
		_, err := c.Catalog().Register(&api.CatalogRegistration{
			Node: "node-a", Address: "10.9.0.1",
			Service: &api.AgentService{ID: name(i) + "-a", Service: name(i), Port: 1000 + i},
		}, nil)
		if err != nil {
			t.Fatalf("registering %s: %v", name(i), err)
		}
	}

	// Exactly the connections the Watcher's design needs: MaxConcurrency
	// reads and two long-polls. More requests would wait and stall.
	limit := DefaultMaxConcurrency + 2
	var counter connCounter
	cl, err := newClient(consulConfig(t, agent, ""), counter.dial, limit)
	if err != nil {
		t.Fatal(err)
	}
	w := New(testOptions(t, cl, nil))
	qs := make([]Query, n)
	for i := range qs {
		qs[i] = Query{Service: name(i)}
	}
	w.SetQueries(qs)
	run(t, w)

	want := func(s Snapshot, i int, extra string) bool {
		return has(s, qs[i].Key(), fmt.Sprintf("[%s-a@10.9.0.1:%d(passing)%s]", name(i), 1000+i, extra))
	}
	s := waitFor(t, w, "all 300 services", func(s Snapshot) bool {
		for i := range n {
			if !want(s, i, "") {
				return false
			}
		}
		return true
	})
	if !s.Synced || !s.Connected || s.Err != "" {
		t.Errorf("synced=%v connected=%v err=%q, want synced and connected without error", s.Synced, s.Connected, s.Err)
	}

	_, err = c.Catalog().Register(&api.CatalogRegistration{
		Node: "node-b", Address: "10.9.0.2",
		Service: &api.AgentService{ID: name(123) + "-b", Service: name(123), Port: 2123},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, "the second instance of svc-123", func(s Snapshot) bool {
		return want(s, 123, " svc-123-b@10.9.0.2:2123(passing)") && want(s, 122, "") && want(s, 124, "")
	})

	st := w.Status()
	if st.Errors != 0 || st.LastError != "" {
		t.Errorf("Status: %d errors, latest %q; want none", st.Errors, st.LastError)
	}
	maxOpen, dialed := counter.stats()
	if maxOpen > limit {
		t.Errorf("%d connections open at once, want at most %d", maxOpen, limit)
	}
	t.Logf("%d requests over %d connections, at most %d open at once", st.Requests, dialed, maxOpen)
}
