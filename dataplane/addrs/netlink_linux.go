package addrs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkKernel drives addresses through rtnetlink in the caller's network
// namespace, over one reused socket.
type NetlinkKernel struct {
	h *netlink.Handle
	// link is the dummy link as EnsureLink last found it: adding 10,000
	// VIPs should not look it up 10,000 times. A write that fails makes
	// the applier re-run EnsureLink, which refreshes it.
	link netlink.Link
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

// LinkExists reports whether the dummy link name exists, without creating
// it (lbd plan --diff); a link of another type is the error EnsureLink
// would return.
func (k *NetlinkKernel) LinkExists(name string) (bool, error) {
	l, err := k.dummyLink(name)
	return l != nil, err
}

// dummyLink looks the link up: nil when there is none, an error when it
// cannot be read or is not a dummy link.
func (k *NetlinkKernel) dummyLink(name string) (netlink.Link, error) {
	l, err := k.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("looking up link %s: %w", name, err)
	case l.Type() != "dummy":
		return nil, fmt.Errorf("%s exists and is a %s link, not dummy: choose another [dataplane] interface", name, l.Type())
	}
	return l, nil
}

func (k *NetlinkKernel) EnsureLink(name string) error {
	l, err := k.dummyLink(name)
	if err != nil {
		return err
	}
	if l == nil {
		if err := k.h.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
			if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("creating dummy link: %w (is the dummy module loaded? modprobe dummy)", err)
			}
			return fmt.Errorf("creating dummy link: %w", err)
		}
		if l, err = k.h.LinkByName(name); err != nil {
			return err
		}
	}
	k.link = l
	if l.Attrs().Flags&net.FlagUp == 0 {
		return k.h.LinkSetUp(l)
	}
	return nil
}

func (k *NetlinkKernel) Dump(link string) ([]netip.Addr, map[netip.Addr]string, error) {
	links, err := k.h.LinkList()
	if err != nil {
		return nil, nil, err
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	all, err := k.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, nil, err
	}
	var on []netip.Addr
	elsewhere := map[netip.Addr]string{}
	for _, a := range all {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if names[a.LinkIndex] == link {
			on = append(on, ip)
		} else {
			elsewhere[ip] = names[a.LinkIndex]
		}
	}
	return on, elsewhere, nil
}

func hostAddr(a netip.Addr) *netlink.Addr {
	bits := 32
	if a.Is6() {
		bits = 128
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, bits)}}
	if a.Is6() {
		addr.Flags = unix.IFA_F_NODAD // a VIP must answer at once, not after DAD
	}
	return addr
}

func (k *NetlinkKernel) linkNamed(name string) (netlink.Link, error) {
	if k.link != nil && k.link.Attrs().Name == name {
		return k.link, nil
	}
	return k.h.LinkByName(name)
}

func (k *NetlinkKernel) Add(link string, a netip.Addr) error {
	l, err := k.linkNamed(link)
	if err != nil {
		return err
	}
	return k.h.AddrAdd(l, hostAddr(a))
}

func (k *NetlinkKernel) Delete(link string, a netip.Addr) error {
	l, err := k.linkNamed(link)
	if err != nil {
		return err
	}
	return k.h.AddrDel(l, hostAddr(a))
}

// DeleteLink removes the dummy link and with it every address on it. A
// missing link is not an error; a link that is not a dummy is refused.
func (k *NetlinkKernel) DeleteLink(name string) (bool, error) {
	l, err := k.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l.Type() != "dummy" {
		return false, fmt.Errorf("%s is a %s link, not lbd's dummy: left alone", name, l.Type())
	}
	return true, k.h.LinkDel(l)
}
