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
		fam := netlink.InetFamily(unix.AF_INET)
		if f.Real.Addr().Is6() {
			fam = unix.AF_INET6
		}
		if byFamily[fam] == nil {
			byFamily[fam] = udpFlows{}
		}
		byFamily[fam][f] = true
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
