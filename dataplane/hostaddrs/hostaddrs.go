// Package hostaddrs follows the box's own addresses through rtnetlink
// events, so that NodePort-like services start or stop serving an address
// as soon as it is added to or removed from the box.
package hostaddrs

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
)

// debounce gathers the burst of events one change makes (an address and
// its routes, several addresses at once) into one report.
const debounce = 100 * time.Millisecond

// List returns every address of every interface, sorted.
func List() ([]netip.Addr, error) {
	all, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(all))
	for _, a := range all {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// Follow reports the box's addresses to onChange now and after every
// change, until ctx ends. A lost subscription is re-established with a
// bounded backoff; addresses are re-listed then, so no change is missed.
func Follow(ctx context.Context, log *slog.Logger, onChange func([]netip.Addr)) {
	var last []netip.Addr
	report := func() {
		addrs, err := List()
		if err != nil {
			log.Warn("listing the box's addresses", "error", err)
			return
		}
		if !slices.Equal(addrs, last) {
			last = addrs
			onChange(addrs)
		}
	}
	backoff := time.Second
	for ctx.Err() == nil {
		updates := make(chan netlink.AddrUpdate, 64)
		done := make(chan struct{})
		err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{
			ErrorCallback: func(err error) { log.Debug("address subscription", "error", err) },
		})
		if err != nil {
			log.Warn("cannot follow the box's addresses; retrying", "error", err, "retry_in", backoff)
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
		follow(ctx, updates, report)
		close(done)
	}
}

// follow reports after each burst of updates until ctx ends or the
// subscription's channel closes.
func follow(ctx context.Context, updates <-chan netlink.AddrUpdate, report func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-updates:
			if !ok {
				return
			}
			timer.Reset(debounce)
		case <-timer.C:
			report()
		}
	}
}
