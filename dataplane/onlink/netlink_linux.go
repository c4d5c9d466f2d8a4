package onlink

import (
	"fmt"
	"log/slog"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// Netlink reads the routes of the process's network namespace through
// rtnetlink.
type Netlink struct {
	Log *slog.Logger // for the subscription's receive errors; may be nil
}

var _ Routes = Netlink{}

// Connected dumps the main table (IPv4 and IPv6) and keeps its connected
// routes, again when the kernel interrupts the dump.
func (Netlink) Connected() ([]netip.Prefix, error) {
	var out []netip.Prefix
	err := genl.RetryDump(netlink.ErrDumpInterrupted, func() error {
		out = out[:0]
		// The iterator spares a []Route of a full BGP table.
		filter := &netlink.Route{Table: unix.RT_TABLE_MAIN}
		return netlink.RouteListFilteredIter(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE, func(r netlink.Route) bool {
			if p, ok := connected(r); ok {
				out = append(out, p)
			}
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out), nil
}

// Subscribe follows the kernel's IPv4 and IPv6 route notifications and
// passes on those of connected routes (added, removed, or replaced).
func (n Netlink) Subscribe(done <-chan struct{}) (<-chan struct{}, error) {
	updates := make(chan netlink.RouteUpdate, 64)
	err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{
		ErrorCallback: func(err error) {
			if n.Log != nil {
				n.Log.Debug("route subscription", "error", err)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to route changes: %w", err)
	}
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		for u := range updates { // closed once done closes the socket
			if _, ok := connected(u.Route); ok {
				select {
				case out <- struct{}{}:
				default: // one pending change says enough
				}
			}
		}
	}()
	return out, nil
}

// connected returns r's prefix when r is a connected route: in the main
// table, unicast, out of a link, with no gateway on any of its nexthops.
// IPv4 marks these scope link; IPv6 routes are all scope universe, so for
// them the missing gateway alone says it.
func connected(r netlink.Route) (netip.Prefix, bool) {
	if r.Table != unix.RT_TABLE_MAIN || r.Type != unix.RTN_UNICAST {
		return netip.Prefix{}, false
	}
	if r.Family == netlink.FAMILY_V4 && r.Scope != netlink.SCOPE_LINK {
		return netip.Prefix{}, false
	}
	switch {
	case len(r.MultiPath) > 0:
		for _, nh := range r.MultiPath {
			if nh.Gw != nil || nh.Via != nil || nh.LinkIndex == 0 {
				return netip.Prefix{}, false
			}
		}
	case r.Gw != nil || r.Via != nil || r.LinkIndex == 0:
		return netip.Prefix{}, false
	}
	return prefixOf(r)
}

// prefixOf is r's destination as a prefix; a route without one is its
// family's default route.
func prefixOf(r netlink.Route) (netip.Prefix, bool) {
	if r.Dst == nil {
		switch r.Family {
		case netlink.FAMILY_V4:
			return netip.PrefixFrom(netip.IPv4Unspecified(), 0), true
		case netlink.FAMILY_V6:
			return netip.PrefixFrom(netip.IPv6Unspecified(), 0), true
		}
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	a = a.Unmap()
	ones, bits := r.Dst.Mask.Size()
	// An IPv4 address may come in 16 bytes with a 128-bit mask.
	ones -= bits - a.BitLen()
	if bits < a.BitLen() || ones < 0 {
		return netip.Prefix{}, false // a non-canonical or mismatched mask
	}
	return netip.PrefixFrom(a, ones).Masked(), true
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
