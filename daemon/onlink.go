package daemon

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/onlink"
)

// onLink checks that the direct-routing real servers of the applied state
// are on a link of the director: after each sync (the destinations) and
// after each change of the connected routes, which are followed live from
// the first sync that has a direct-routing real server. It reports, never
// refuses or drains: the admin may be adding the link.
type onLink struct {
	log *slog.Logger
	// offLink is told how many real servers are off every link (metrics).
	offLink func(int)

	mu        sync.Mutex
	dests     []onlink.Dest
	connected []netip.Prefix
	known     bool // connected has been read
	problems  []onlink.Problem
}

// startOnLink registers the check after each sync; call before the
// dataplane's loop starts.
func (d *daemon) startOnLink(ctx context.Context) {
	o := &onLink{log: d.log, offLink: d.m.SetRealServersOffLink}
	d.onlink = o
	var follow sync.Once
	d.dp.OnSync(func(res dataplane.SyncResult) {
		if res.Waiting {
			return
		}
		st, ok := d.dp.Applied()
		if !ok {
			return
		}
		d.m.ObserveForwarding(st.Services)
		dests := onlink.Dests(st)
		if len(dests) > 0 {
			// A NAT-only director never reads its routes (a full BGP
			// table may sit in the main table).
			follow.Do(func() {
				d.wg.Go(func() { onlink.Follow(ctx, d.log, onlink.Netlink{Log: d.log}, o.setConnected) })
			})
		}
		o.setDests(dests)
	})
}

// setDests takes the direct-routing destinations of the state just
// applied.
func (o *onLink) setDests(dests []onlink.Dest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.dests = dests
	o.check()
}

// setConnected takes the director's connected routes as they changed.
func (o *onLink) setConnected(ps []netip.Prefix) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.connected, o.known = ps, true
	o.check()
}

// check decides again, and logs each problem once, when it appears, and
// when it is resolved (or its real server leaves). Called with mu held.
func (o *onLink) check() {
	var ps []onlink.Problem
	if o.known {
		ps = onlink.Check(o.dests, o.connected)
	}
	before := make(map[onlink.Problem]bool, len(o.problems))
	for _, p := range o.problems {
		before[p] = true
	}
	for _, p := range ps {
		if !before[p] {
			o.log.Warn("direct-routing real server is on no link of this director; it stays in service",
				"service", p.Service, "real_server", p.Addr.String(), "source", p.Source.String(), "problem", p.String())
		}
		delete(before, p)
	}
	for _, p := range o.problems { // in order: those still in before are resolved
		if before[p] {
			o.log.Info("direct-routing real server problem resolved", "service", p.Service, "real_server", p.Addr.String(),
				"source", p.Source.String(), "now", o.now(p))
		}
	}
	if o.offLink != nil {
		o.offLink(len(ps))
	}
	o.problems = ps
}

// now says why a resolved problem went: its link came, or it left.
func (o *onLink) now(p onlink.Problem) string {
	if slices.Contains(o.dests, p.Dest) {
		return "on a link"
	}
	return "no longer a direct-routing real server"
}

// Problems returns the direct-routing real servers found off every link
// at the last check; nil before the routes were read.
func (o *onLink) Problems() []onlink.Problem {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.problems
}
