package desired

import (
	"net/netip"
	"slices"
)

// KeepRemoved returns next with what it would remove from prev put back
// (but no VIP next does not serve):
// prev's virtual servers that next lacks, and in the virtual servers both
// have, prev's destinations that next lacks (with prev's weight). All else
// is next's: changed weights, new virtual servers and destinations, health.
// The safety valve applies it when a sync would delete too much at once,
// so that the mass removal waits while every other change still goes in.
func KeepRemoved(prev, next State) State {
	out := next
	out.Services = make([]Service, 0, max(len(prev.Services), len(next.Services)))
	Pair(prev.Services, next.Services, func(p, n *Service) {
		switch {
		case n == nil: // only in prev: kept
			out.Services = append(out.Services, *p)
		case p == nil || Gone(p.Dests, n.Dests) == 0:
			out.Services = append(out.Services, *n)
		default:
			s := *n
			s.Dests = unionDests(n.Dests, p.Dests)
			out.Services = append(out.Services, s)
		}
	})
	// A VIP this box stopped serving is never kept: holding it would
	// leave it bound on two boxes.
	out.VIPs = next.serving.filter(unionAddrs(prev.VIPs, next.VIPs))
	out.NodeAddrs = unionAddrs(prev.NodeAddrs, next.NodeAddrs)
	out.Announce = make(map[string][]netip.Addr, len(next.Announce))
	for iface, vips := range prev.Announce {
		out.Announce[iface] = next.heldFloating(next.serving.filter(vips))
	}
	for iface, vips := range next.Announce {
		out.Announce[iface] = unionAddrs(out.Announce[iface], vips)
	}
	return out
}

// Pair walks two lists of virtual servers sorted by key side by side and
// calls f once per key: with both, or with nil for the side that lacks it.
func Pair(a, b []Service, f func(a, b *Service)) {
	for i, j := 0, 0; i < len(a) || j < len(b); {
		c := 0
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = a[i].Key.Compare(b[j].Key)
		}
		switch {
		case c < 0:
			f(&a[i], nil)
			i++
		case c > 0:
			f(nil, &b[j])
			j++
		default:
			f(&a[i], &b[j])
			i++
			j++
		}
	}
}

// Gone counts the destinations of a that are not in b (both sorted by
// address, usually the very same slice).
func Gone(a, b []Dest) int {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return 0
	}
	n := 0
	for _, d := range a {
		if !HasDest(b, d.Addr) {
			n++
		}
	}
	return n
}

// HasDest reports whether ds (sorted by address) has a destination at a.
func HasDest(ds []Dest, a netip.AddrPort) bool {
	_, ok := slices.BinarySearchFunc(ds, a, func(x Dest, t netip.AddrPort) int { return x.Addr.Compare(t) })
	return ok
}

// unionDests returns next's destinations plus prev's that next lacks,
// sorted by address, in a new slice.
func unionDests(next, prev []Dest) []Dest {
	out := slices.Clone(next)
	for _, d := range prev {
		if !HasDest(next, d.Addr) {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b Dest) int { return a.Addr.Compare(b.Addr) })
	return out
}

func unionAddrs(a, b []netip.Addr) []netip.Addr {
	out := append(slices.Clone(a), b...)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// heldFloating returns addrs without st's held floating addresses: a
// backup never answers ARP for them.
func (st State) heldFloating(addrs []netip.Addr) []netip.Addr {
	for _, f := range st.Floating {
		if f.Held && slices.Contains(addrs, f.Prefix.Addr()) {
			addrs = slices.DeleteFunc(slices.Clone(addrs), func(a netip.Addr) bool { return a == f.Prefix.Addr() })
		}
	}
	return addrs
}
