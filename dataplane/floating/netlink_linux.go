package floating

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkKernel drives addresses through rtnetlink in the caller's network
// namespace.
type NetlinkKernel struct {
	h *netlink.Handle
}

var _ Kernel = (*NetlinkKernel)(nil)

// OpenKernel opens an rtnetlink socket in the current network namespace.
func OpenKernel() (*NetlinkKernel, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	return &NetlinkKernel{h: h}, nil
}

// Close releases the socket.
func (k *NetlinkKernel) Close() { k.h.Close() }

func (k *NetlinkKernel) link(name string) (netlink.Link, error) {
	l, err := k.h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	}
	return l, nil
}

// Addrs lists the addresses on link, both families.
func (k *NetlinkKernel) Addrs(link string) ([]netip.Prefix, error) {
	l, err := k.link(link)
	if err != nil {
		return nil, err
	}
	as, err := k.h.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", link, err)
	}
	out := make([]netip.Prefix, 0, len(as))
	for _, a := range as {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip.Unmap(), ones))
	}
	return out, nil
}

func toNetlink(p netip.Prefix) *netlink.Addr {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}}
}

// Add binds p on link. IPv6 addresses skip duplicate address detection:
// the address moves to this box because the other gave it up, and DAD
// would keep it tentative (unusable) for a second or more.
func (k *NetlinkKernel) Add(link string, p netip.Prefix) error {
	l, err := k.link(link)
	if err != nil {
		return err
	}
	a := toNetlink(p)
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return k.h.AddrAdd(l, a)
}

// Delete removes p from link.
func (k *NetlinkKernel) Delete(link string, p netip.Prefix) error {
	l, err := k.link(link)
	if err != nil {
		return err
	}
	return k.h.AddrDel(l, toNetlink(p))
}
