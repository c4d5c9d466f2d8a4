package consul

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"golang.org/x/time/rate"

	"github.com/lbdproject/lbd/discovery/consul/internal/backoff"
)

// pollKind names a change trigger.
type pollKind int

const (
	catalogPoll pollKind = iota // /v1/catalog/services
	checksPoll                  // /v1/health/state/any
	numPollKinds
)

func (k pollKind) String() string {
	if k == catalogPoll {
		return "/v1/catalog/services"
	}
	return "/v1/health/state/any"
}

// pollEvent is a change trigger's outcome: an error, or an answer whose
// index moved.
type pollEvent struct {
	owner *dcState
	kind  pollKind
	err   error
	// reset marks an answer that cannot be compared with the previous
	// one: the first, the first after errors, or the re-read after the
	// index went backwards.
	reset    bool
	index    uint64
	services map[string][]string // catalogPoll
	checks   api.HealthChecks    // checksPoll
}

// pollCtl lets one trigger of a datacenter make the others read again.
type pollCtl struct {
	resync atomic.Bool // read without blocking before waiting again
	mu     sync.Mutex
	cancel context.CancelFunc // of the blocking request in flight, or nil
}

// resync makes d's triggers, except the one of kind except (numPollKinds
// for none), read without blocking before they wait again, and interrupts
// their blocking requests.
//
// A trigger that fails or sees its index go backwards, or a read that
// cannot reach the agent, has found the agent gone, restarted or
// restored. The triggers may not have noticed: a long-poll may have been
// answered ("nothing new") while the agent shut down and the next one sent
// to the restarted agent with the old index. Consul then holds that query
// until the index passes the old one, or for the whole WaitTime (seen with
// a real agent). Non-blocking reads (retries) are left alone, so that two
// failing triggers do not keep cutting each other's backoff short.
func (d *dcState) resync(except pollKind) {
	for k := range d.ctl {
		if pollKind(k) == except {
			continue
		}
		c := &d.ctl[k]
		c.resync.Store(true)
		c.mu.Lock()
		if c.cancel != nil {
			c.cancel()
		}
		c.mu.Unlock()
	}
}

// poll runs one change trigger of d until ctx is done: a blocking query
// whose answers are sent to the loop when their index moves.
func (l *loop) poll(ctx context.Context, d *dcState, kind pollKind) {
	// A misbehaving index (always moving, or going backwards) makes every
	// query return at once; the limiter keeps that from spinning.
	lim := rate.NewLimiter(rate.Every(l.opts.MinInterval), burst)
	bo := backoff.New(l.opts.MinRetry, l.opts.MaxRetry)
	ctl := &d.ctl[kind]
	var (
		index uint64 // of the latest answer
		have  bool   // index is valid to wait on
	)
	for {
		if err := lim.Wait(ctx); err != nil {
			return
		}
		if ctl.resync.Swap(false) {
			have = false
		}
		var wait uint64 // 0: a non-blocking read
		if have {
			// Consul answers a wait index of 0 at once: never block on it.
			wait = max(index, 1)
		}
		rctx, cancel := context.WithCancel(ctx)
		if wait > 0 {
			ctl.mu.Lock()
			ctl.cancel = cancel
			ctl.mu.Unlock()
		}
		ev, err := l.pollOnce(rctx, d.name, kind, wait)
		ctl.mu.Lock()
		ctl.cancel = nil
		ctl.mu.Unlock()
		interrupted := rctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && interrupted {
			continue // by resync: read again at once
		}
		l.noteRequest(err)
		if err != nil {
			// The agent may come back restarted, its index lower than
			// ours: a blocking query on our index would then wait the
			// whole WaitTime before saying so. Read without blocking
			// first, and so must the other trigger.
			have = false
			d.resync(kind)
			if !l.send(ctx, pollEvent{owner: d, kind: kind, err: err}) {
				return
			}
			if !sleep(ctx, bo.Next()) {
				return
			}
			continue
		}
		bo.Reset()
		if have && ev.index < index {
			// Consul's guidance: an index that goes backwards (a snapshot
			// restore, a server behind the others) makes the wait index
			// meaningless. Discard the answer and read again without
			// blocking, and so must the other trigger.
			l.log.Debug("Consul index went backwards; reading again", "endpoint", kind.String(), "datacenter", d.name, "was", index, "now", ev.index)
			have = false
			d.resync(kind)
			continue
		}
		if have && ev.index == index {
			continue // the wait elapsed with nothing new
		}
		ev.owner, ev.kind, ev.reset = d, kind, !have
		index, have = ev.index, true
		if !l.send(ctx, ev) {
			return
		}
	}
}

// pollOnce makes one request of a change trigger; wait 0 makes it
// non-blocking.
func (l *loop) pollOnce(ctx context.Context, dc string, kind pollKind, wait uint64) (_ pollEvent, err error) {
	defer l.recoverAnswer(fmt.Sprintf("watching %s%s", kind, inDC(dc)), &err)
	// A non-blocking read is the first, or follows a sign that the agent
	// went away. A restarted server answers default reads from a state
	// store that has not replayed its log yet (an empty catalog, index 1)
	// until its leadership is established; a consistent read waits for
	// that, or fails.
	q := &api.QueryOptions{Datacenter: dc, RequireConsistent: wait == 0}
	timeout := l.opts.RequestTimeout
	if wait > 0 {
		q.WaitIndex, q.WaitTime = wait, l.opts.WaitTime
		// Consul adds up to WaitTime/16 of jitter to the wait.
		timeout += l.opts.WaitTime + l.opts.WaitTime/16
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	q = q.WithContext(ctx)

	var (
		ev   pollEvent
		meta *api.QueryMeta
	)
	switch kind {
	case catalogPoll:
		ev.services, meta, err = l.opts.Client.Catalog().Services(q)
	default:
		ev.checks, meta, err = l.opts.Client.Health().State(api.HealthAny, q)
	}
	if err != nil {
		return ev, fmt.Errorf("watching %s%s: %w", kind, inDC(dc), unwrapURLError(err))
	}
	ev.index = meta.LastIndex
	return ev, nil
}

// send hands ev to the loop.
func (l *loop) send(ctx context.Context, ev pollEvent) bool {
	select {
	case l.events <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func inDC(dc string) string {
	if dc == "" {
		return ""
	}
	return " in " + dc
}

// checkRef and checkDigest are what matters of a health check for telling
// which services a change concerns: not its output, which changes often.
type checkRef struct{ node, id string }
type checkDigest struct{ service, status string }

func digestChecks(hc api.HealthChecks) map[checkRef]checkDigest {
	m := make(map[checkRef]checkDigest, len(hc))
	for _, c := range hc {
		m[checkRef{c.Node, c.CheckID}] = checkDigest{c.ServiceName, c.Status}
	}
	return m
}

// diffChecks returns the services whose checks differ between old and new,
// and the nodes whose node-level checks (serfHealth, node maintenance)
// differ: those concern every service on the node.
func diffChecks(old, new map[checkRef]checkDigest) (services, nodes map[string]bool) {
	services, nodes = map[string]bool{}, map[string]bool{}
	note := func(r checkRef, d checkDigest) {
		if d.service == "" {
			nodes[r.node] = true
		} else {
			services[d.service] = true
		}
	}
	for r, o := range old {
		n, ok := new[r]
		if ok && n == o {
			continue
		}
		note(r, o)
		if ok {
			note(r, n)
		}
	}
	for r, n := range new {
		if _, ok := old[r]; !ok {
			note(r, n)
		}
	}
	return services, nodes
}
