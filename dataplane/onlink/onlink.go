// Package onlink checks that direct-routing real servers sit on a link of
// the director. IPVS's direct routing hands the packet, still addressed to
// the VIP, to the real server's link-layer address: a real server that no
// connected route of the director covers cannot get it. The configuration
// cannot know this; the box's routes at run time do. The decision (Check)
// is a pure function; Follow reads the routes behind an interface.
package onlink

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// Dest is one direct-routing real server of one lbd service.
type Dest struct {
	Service string
	Addr    netip.AddrPort
	// Source is where it comes from: a file:line, "consul NODE/ID" or
	// "sorry_server of NAME".
	Source config.Pos
}

// Dests lists the direct-routing destinations of st, once per service
// and real server (a service with several VIPs has the same real servers
// under each), in st's order. Tunnels route anywhere: they are not listed.
func Dests(st desired.State) []Dest {
	var out []Dest
	var seen map[Dest]bool
	for _, svc := range st.Services {
		if svc.Method == lvs.NAT { // NAT services hold NAT destinations only
			continue
		}
		for _, d := range svc.Dests {
			if d.Forward().Method != lvs.DR {
				continue
			}
			dd := Dest{Service: svc.Name, Addr: d.Addr, Source: d.Source()}
			if seen == nil {
				seen = map[Dest]bool{}
			}
			if !seen[dd] {
				seen[dd] = true
				out = append(out, dd)
			}
		}
	}
	return out
}

// Problem is a direct-routing real server that no connected route of the
// director covers. lbd keeps it in service: the link may be on its way.
type Problem struct {
	Dest
}

func (p Problem) String() string {
	a := p.Addr.Addr()
	return fmt.Sprintf("real server %s of service %s forwards by direct routing, but no connected route of this director covers %s: "+
		"direct routing hands the packet to the real server's link-layer address on a link they share, so it cannot reach this one. "+
		"lbd neither refuses nor drains it (the link may be on its way); give the director an address in its network (or a link route to it), or use forward = \"tun\"",
		p.Addr, p.Service, a)
}

// Check returns the destinations of dests that no prefix of connected
// (the director's connected routes) covers, in dests' order.
func Check(dests []Dest, connected []netip.Prefix) []Problem {
	var out []Problem
	for _, d := range dests {
		a := d.Addr.Addr().Unmap()
		if !slices.ContainsFunc(connected, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, Problem{d})
		}
	}
	return out
}
