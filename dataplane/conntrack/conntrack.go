// Package conntrack removes the conntrack entries of UDP real servers lbd
// deleted, so that clients' "connections" (which, for UDP, never end by
// themselves) stop being sent to a real server that is gone.
package conntrack

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// udpReplyFrom matches UDP flows whose reply comes from one of a set of
// real servers: with IPVS NAT and vs/conntrack=1 those are the flows that
// were scheduled to them.
type udpReplyFrom map[netip.AddrPort]bool

func (f udpReplyFrom) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != syscall.IPPROTO_UDP {
		return false
	}
	ip, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	return ok && f[netip.AddrPortFrom(ip.Unmap(), flow.Reverse.SrcPort)]
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

// DeleteUDP deletes every UDP flow answered by one of dests, in one pass
// over the table per address family, and returns how many it deleted.
func (c *Cleaner) DeleteUDP(dests []netip.AddrPort) (uint, error) {
	byFamily := map[netlink.InetFamily]udpReplyFrom{}
	for _, d := range dests {
		fam := netlink.InetFamily(unix.AF_INET)
		if d.Addr().Is6() {
			fam = unix.AF_INET6
		}
		if byFamily[fam] == nil {
			byFamily[fam] = udpReplyFrom{}
		}
		byFamily[fam][d] = true
	}
	var total uint
	var errs []error
	for fam, f := range byFamily {
		// A dump the kernel interrupts (the table changed under it) may
		// have missed flows: run it again, a few times at most.
		for try := 0; ; try++ {
			n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f)
			total += n
			if err == nil || !errors.Is(err, netlink.ErrDumpInterrupted) || try == 2 {
				if err != nil {
					errs = append(errs, fmt.Errorf("deleting UDP conntrack entries: %w", err))
				}
				break
			}
		}
	}
	return total, errors.Join(errs...)
}
