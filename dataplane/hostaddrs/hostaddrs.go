// Package hostaddrs follows the box's own addresses through rtnetlink
// events, so that NodePort-like services start or stop serving an address
// as soon as it is added to or removed from the box.
package hostaddrs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// debounce gathers the burst of events one change makes (an address and
// its routes, several addresses at once) into one report.
const debounce = 100 * time.Millisecond

// List returns every address of every interface but skip, sorted. skip
// is lbd's dummy interface: its addresses are lbd's VIPs (10,000 of them,
// maybe), not the box's.
func List(skip string) ([]netip.Addr, error) {
	addrs, _, err := list(skip)
	return addrs, err
}

// list is List, also returning skip's interface index (0 when it has
// none).
func list(skip string) ([]netip.Addr, int, error) {
	skipIndex := 0
	l, err := netlink.LinkByName(skip)
	var notFound netlink.LinkNotFoundError
	switch {
	case err == nil:
		skipIndex = l.Attrs().Index
	case !errors.As(err, &notFound):
		// Without skip's index lbd's VIPs would pass for the box's own.
		return nil, 0, fmt.Errorf("looking up %s: %w", skip, err)
	}
	addrs, err := listWith(skipIndex, func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_ALL) })
	return addrs, skipIndex, err
}

// listWith lists the addresses with addrList, again when the kernel
// interrupts the dump (an address came or went meanwhile: lbd binding a
// VIP, the IPv6 link-local address of a link just set up), and leaves out
// those of the interface skipIndex.
func listWith(skipIndex int, addrList func() ([]netlink.Addr, error)) ([]netip.Addr, error) {
	var all []netlink.Addr
	err := genl.RetryDump(netlink.ErrDumpInterrupted, func() error {
		var err error
		all, err = addrList()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	out := make([]netip.Addr, 0, len(all))
	for _, a := range all {
		if skipIndex != 0 && a.LinkIndex == skipIndex {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}

// Follow reports the box's addresses (but skip's, see List) to onChange
// now and after every change, until ctx ends. A lost subscription is
// re-established with a bounded backoff; addresses are re-listed then, so
// no change is missed. Changes on skip (lbd binding its VIPs) are ignored.
func Follow(ctx context.Context, log *slog.Logger, skip string, onChange func([]netip.Addr)) {
	var last []netip.Addr
	skipIndex := 0
	report := func() {
		addrs, index, err := list(skip)
		skipIndex = index
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
		follow(ctx, updates, func(u netlink.AddrUpdate) bool { return skipIndex == 0 || u.LinkIndex != skipIndex }, report)
		close(done)
	}
}

// follow reports after each burst of relevant updates until ctx ends or
// the subscription's channel closes.
func follow(ctx context.Context, updates <-chan netlink.AddrUpdate, relevant func(netlink.AddrUpdate) bool, report func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-updates:
			if !ok {
				return
			}
			if relevant(u) {
				timer.Reset(debounce)
			}
		case <-timer.C:
			report()
		}
	}
}
