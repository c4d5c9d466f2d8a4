// Package conntrack removes conntrack entries that would misdirect
// packets: those of UDP real servers lbd deleted, so that clients'
// "connections" (which, for UDP, never end by themselves) stop being sent
// to a real server that is gone; and those of VIPs this box stopped
// serving, so that they are not there when it serves them again (a
// failover back to it).
//
// Why a VIP's old entries harm: with vs/conntrack=1 each connection IPVS
// forwards has an entry, client → VIP with the reply from the real
// server. When the box gives the VIP up, the entries stay (established
// ones for days, TIME_WAIT ones two minutes), and their sequence windows
// stop. When it takes the VIP over again, a packet of a connection that
// went on through the peer meanwhile, or of a new one that reuses the
// client's port, matches the old entry, falls outside its window and is
// invalid to conntrack; IPVS forwards it anyway, and on its way out it is
// tracked again, as client → real server, whose reply is the old entry's:
// NAT makes the new entry unique by giving it another source port, and
// the real server, which does not know that port, answers with a reset.
package conntrack

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Flow names the UDP flows of one virtual server scheduled to one real
// server: with IPVS NAT and vs/conntrack=1 their original destination is
// the virtual server and their reply comes from the real server.
type Flow struct {
	VIP  netip.AddrPort // the virtual server's address and port
	Real netip.AddrPort
}

// udpFlows matches the UDP flows of a set of (virtual server, real server)
// pairs. Matching the virtual server too spares the flows a real server
// still serves for another virtual server (as kube-proxy does).
type udpFlows map[Flow]bool

func (f udpFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != syscall.IPPROTO_UDP {
		return false
	}
	vip, ok1 := netip.AddrFromSlice(flow.Forward.DstIP)
	real, ok2 := netip.AddrFromSlice(flow.Reverse.SrcIP)
	return ok1 && ok2 && f[Flow{
		VIP:  netip.AddrPortFrom(vip.Unmap(), flow.Forward.DstPort),
		Real: netip.AddrPortFrom(real.Unmap(), flow.Reverse.SrcPort),
	}]
}

// Cleaner deletes conntrack entries through one reused netlink socket.
type Cleaner struct {
	h *netlink.Handle
}

// Open returns a Cleaner in the current network namespace.
func Open() (*Cleaner, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening conntrack netlink socket: %w", err)
	}
	return &Cleaner{h: h}, nil
}

// Close releases the socket.
func (c *Cleaner) Close() { c.h.Close() }

// DeleteUDP deletes the UDP flows of every pair in flows, in one pass
// over the table per address family, and returns how many it deleted.
func (c *Cleaner) DeleteUDP(flows []Flow) (uint, error) {
	byFamily := map[netlink.InetFamily]udpFlows{}
	for _, f := range flows {
		fam := familyOf(f.Real.Addr())
		if byFamily[fam] == nil {
			byFamily[fam] = udpFlows{}
		}
		byFamily[fam][f] = true
	}
	var total uint
	var errs []error
	for fam, f := range byFamily {
		n, err := c.deleteMatching(fam, f)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting UDP conntrack entries: %w", err))
		}
	}
	return total, errors.Join(errs...)
}

// unNATedTo matches the entries of connections to a set of addresses
// (VIPs) whose reply goes back to the client itself: what IPVS NAT and
// direct routing leave. A source-NATed one (masquerade, or SNAT to a
// floating address) replies to this box's address instead; conntrackd
// hands those over to the peer, and they are left to it.
type unNATedTo map[netip.Addr]bool

func (m unNATedTo) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok || !m[dst.Unmap()] {
		return false
	}
	src, ok1 := netip.AddrFromSlice(flow.Forward.SrcIP)
	back, ok2 := netip.AddrFromSlice(flow.Reverse.DstIP)
	return ok1 && ok2 && src.Unmap() == back.Unmap() && flow.Forward.SrcPort == flow.Reverse.DstPort
}

// DeleteReleased deletes the entries of connections to vips that were not
// source-NATed, every protocol, in one pass over the table per address
// family, and returns how many it deleted.
func (c *Cleaner) DeleteReleased(vips []netip.Addr) (uint, error) {
	byFamily := map[netlink.InetFamily]unNATedTo{}
	for _, a := range vips {
		fam := familyOf(a)
		if byFamily[fam] == nil {
			byFamily[fam] = unNATedTo{}
		}
		byFamily[fam][a.Unmap()] = true
	}
	var total uint
	var errs []error
	for fam, m := range byFamily {
		n, err := c.deleteMatching(fam, m)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("deleting the conntrack entries of released VIPs: %w", err))
		}
	}
	return total, errors.Join(errs...)
}

// deleteMatching deletes one family's entries that f matches. A dump the
// kernel interrupts (the table changed under it) may have missed some: it
// is run again, a few times at most.
func (c *Cleaner) deleteMatching(fam netlink.InetFamily, f netlink.CustomConntrackFilter) (uint, error) {
	var total uint
	for try := 0; ; try++ {
		n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f)
		total += n
		if err == nil || !errors.Is(err, netlink.ErrDumpInterrupted) || try == 2 {
			return total, err
		}
	}
}

func familyOf(a netip.Addr) netlink.InetFamily {
	if a.Unmap().Is6() {
		return unix.AF_INET6
	}
	return unix.AF_INET
}
