package desired

import (
	"net/netip"
	"slices"
)

// KeepRemoved returns next with what it would remove from prev put back:
// prev's virtual servers that next lacks, and in the virtual servers both
// have, prev's destinations that next lacks (with prev's weight). All else
// is next's: changed weights, new virtual servers and destinations, health.
// The safety valve applies it when a sync would delete too much at once,
// so that the mass removal waits while every other change still goes in.
func KeepRemoved(prev, next State) State {
	out := next
	out.Services = make([]Service, 0, max(len(prev.Services), len(next.Services)))
	ps, ns := prev.Services, next.Services
	i, j := 0, 0
	for i < len(ps) || j < len(ns) {
		c := 0
		switch {
		case i == len(ps):
			c = 1
		case j == len(ns):
			c = -1
		default:
			c = ps[i].Key.Compare(ns[j].Key)
		}
		switch {
		case c < 0: // only in prev: kept
			out.Services = append(out.Services, ps[i])
			i++
		case c > 0: // new
			out.Services = append(out.Services, ns[j])
			j++
		default:
			s := ns[j]
			if Gone(ps[i].Dests, s.Dests) > 0 {
				s.Dests = unionDests(s.Dests, ps[i].Dests)
			}
			out.Services = append(out.Services, s)
			i++
			j++
		}
	}
	out.VIPs = unionAddrs(prev.VIPs, next.VIPs)
	out.NodeAddrs = unionAddrs(prev.NodeAddrs, next.NodeAddrs)
	out.Announce = make(map[string][]netip.Addr, len(next.Announce))
	for iface, vips := range prev.Announce {
		out.Announce[iface] = vips
	}
	for iface, vips := range next.Announce {
		out.Announce[iface] = unionAddrs(out.Announce[iface], vips)
	}
	return out
}

// Gone counts the destinations of a that are not in b (both sorted by
// address, usually the very same slice).
func Gone(a, b []Dest) int {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return 0
	}
	n := 0
	for _, d := range a {
		if _, ok := findDest(b, d.Addr); !ok {
			n++
		}
	}
	return n
}

func findDest(ds []Dest, a netip.AddrPort) (int, bool) {
	return slices.BinarySearchFunc(ds, a, func(x Dest, t netip.AddrPort) int { return x.Addr.Compare(t) })
}

// unionDests returns next's destinations plus prev's that next lacks,
// sorted by address, in a new slice.
func unionDests(next, prev []Dest) []Dest {
	out := slices.Clone(next)
	for _, d := range prev {
		if _, ok := findDest(next, d.Addr); !ok {
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
