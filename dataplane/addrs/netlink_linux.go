package addrs

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// NetlinkKernel drives addresses through rtnetlink in the caller's network
// namespace, over one reused socket.
type NetlinkKernel struct {
	h *netlink.Handle
	// link is the dummy link as EnsureLink last found it: adding 10,000
	// VIPs should not look it up 10,000 times. A write that fails makes
	// the applier re-run EnsureLink, which refreshes it.
	link netlink.Link
	// kind is the link type lbd creates and accepts: "dummy" (tests on
	// hosts without the dummy module use another).
	kind string
}

var (
	_ Kernel  = (*NetlinkKernel)(nil)
	_ Adopter = (*NetlinkKernel)(nil)
)

// OpenKernel opens an rtnetlink socket in the current network namespace.
func OpenKernel() (*NetlinkKernel, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("opening rtnetlink socket: %w", err)
	}
	return &NetlinkKernel{h: h, kind: "dummy"}, nil
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
	case l.Type() != k.kind:
		return nil, fmt.Errorf("%s exists and is a %s link, not %s: choose another [dataplane] interface", name, l.Type(), k.kind)
	}
	return l, nil
}

// EnsureLink creates the link, marked, or checks that the one there is
// lbd's; it sets it up. An unmarked link is refused before anything is
// changed on it.
func (k *NetlinkKernel) EnsureLink(name string) error {
	l, err := k.dummyLink(name)
	switch {
	case err != nil:
		return err
	case l == nil:
		if l, err = k.createLink(name); err != nil {
			return err
		}
	case !IsMarked(l.Attrs().Alias):
		k.link = nil
		return &ForeignLinkError{Link: name}
	}
	k.link = l
	if l.Attrs().Flags&net.FlagUp == 0 {
		return k.h.LinkSetUp(l)
	}
	return nil
}

// createLink adds the link and marks it. The kernel takes no alias in the
// creating message (rtnl_create_link ignores IFLA_IFALIAS), hence a second
// one; a link lbd made but could not mark is removed again, or the next
// start would refuse it.
func (k *NetlinkKernel) createLink(name string) (netlink.Link, error) {
	err := k.h.LinkAdd(&netlink.GenericLink{LinkAttrs: netlink.LinkAttrs{Name: name}, LinkType: k.kind})
	switch {
	case err != nil && (errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOENT)):
		return nil, fmt.Errorf("creating %s link: %w (is the %s module loaded? modprobe %s)", k.kind, err, k.kind, k.kind)
	case err != nil:
		return nil, fmt.Errorf("creating %s link: %w", k.kind, err)
	}
	l, err := k.h.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("looking up the new link %s: %w", name, err)
	}
	if err := k.h.LinkSetAlias(l, Marker); err != nil {
		if derr := k.h.LinkDel(l); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing it again: %w", derr))
		}
		return nil, fmt.Errorf("marking the new link %s as lbd's: %w", name, err)
	}
	l.Attrs().Alias = Marker
	return l, nil
}

// MarkLink sets lbd's Marker as the link's alias: lbd adopts it.
func (k *NetlinkKernel) MarkLink(name string) error {
	l, err := k.dummyLink(name)
	switch {
	case err != nil:
		return err
	case l == nil:
		return fmt.Errorf("link %s: %w", name, unix.ENODEV)
	}
	return k.h.LinkSetAlias(l, Marker)
}

// Dump lists the links, then the addresses, again when the kernel
// interrupts either dump (an address appeared meanwhile: the IPv6
// link-local one of a link just set up, say).
func (k *NetlinkKernel) Dump(link string) ([]netip.Addr, map[netip.Addr]string, error) {
	var links []netlink.Link
	var all []netlink.Addr
	err := genl.RetryDump(netlink.ErrDumpInterrupted, func() error {
		var err error
		if links, err = k.h.LinkList(); err != nil {
			return fmt.Errorf("listing links: %w", err)
		}
		if all, err = k.h.AddrList(nil, netlink.FAMILY_ALL); err != nil {
			return fmt.Errorf("listing addresses: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
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

// DeleteLink removes lbd's dummy link and with it every address on it. A
// missing link is not an error; a link that is not a dummy is refused, and
// so is one without lbd's mark (*ForeignLinkError).
func (k *NetlinkKernel) DeleteLink(name string) (bool, error) {
	l, err := k.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if l.Type() != k.kind {
		return false, fmt.Errorf("%s is a %s link, not lbd's %s: left alone", name, l.Type(), k.kind)
	}
	if !IsMarked(l.Attrs().Alias) {
		return false, &ForeignLinkError{Link: name, Deleting: true}
	}
	if k.link != nil && k.link.Attrs().Name == name {
		k.link = nil
	}
	return true, k.h.LinkDel(l)
}
