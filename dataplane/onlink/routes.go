package onlink

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"
)

// Routes is the director's routing table as Follow reads it.
type Routes interface {
	// Connected lists the prefixes the director reaches on a link: the
	// main table's unicast routes without a gateway, sorted.
	Connected() ([]netip.Prefix, error)
	// Subscribe delivers a value after a change that may alter Connected,
	// until done is closed; the channel closes when the subscription is
	// lost.
	Subscribe(done <-chan struct{}) (<-chan struct{}, error)
}

// debounce gathers the burst of route changes one change makes (an
// address and its routes, a link going down) into one read.
const debounce = 100 * time.Millisecond

// Follow reports the connected prefixes to onChange now and after every
// change, until ctx ends. A lost subscription is re-established with a
// bounded backoff and the routes read again, so no change is missed. The
// routes are read (a dump of the main table) only when a connected route
// changed, never per sync: a director with a full BGP table in its main
// table would otherwise dump it every second.
func Follow(ctx context.Context, log *slog.Logger, r Routes, onChange func([]netip.Prefix)) {
	var last []netip.Prefix
	known := false
	report := func() {
		ps, err := r.Connected()
		if err != nil {
			log.Warn("reading the director's connected routes (for the direct-routing check)", "error", err)
			return
		}
		if !known || !slices.Equal(ps, last) {
			last, known = ps, true
			onChange(ps)
		}
	}
	backoff := time.Second
	for ctx.Err() == nil {
		done := make(chan struct{})
		changes, err := r.Subscribe(done)
		if err != nil {
			close(done)
			log.Warn("cannot follow the director's routes (for the direct-routing check); retrying", "error", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
		report()
		follow(ctx, changes, report)
		close(done)
	}
}

// follow reports after each burst of changes until ctx ends or the
// subscription's channel closes.
func follow(ctx context.Context, changes <-chan struct{}, report func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			timer.Reset(debounce)
		case <-timer.C:
			report()
		}
	}
}
