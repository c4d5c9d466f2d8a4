package ipset

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
)

// maxElements bounds each set; the kernel's default (65536) is too small
// for source ranges of many services.
const maxElements = 1 << 20

// NetlinkKernel drives ipsets over one reused netlink socket.
type NetlinkKernel struct {
	h *netlink.Handle
}

var _ Kernel = (*NetlinkKernel)(nil)

// OpenKernel opens a netfilter netlink socket in the current namespace.
func OpenKernel() (*NetlinkKernel, error) {
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	return &NetlinkKernel{h: h}, nil
}

// OpenKernelIn opens the socket in another namespace (tests).
func OpenKernelIn(ns netns.NsHandle) (*NetlinkKernel, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	return &NetlinkKernel{h: h}, nil
}

// Close releases the socket.
func (k *NetlinkKernel) Close() { k.h.Close() }

func (k *NetlinkKernel) Dump() (map[string]Set, error) {
	all, err := k.h.IpsetListAll()
	if err != nil {
		return nil, err
	}
	out := map[string]Set{}
	// A large set arrives over several messages, one result each.
	for _, r := range all {
		if !IsLBD(r.SetName) {
			continue
		}
		s := out[r.SetName]
		if r.TypeName != "" {
			s.Type = desired.SetType(r.TypeName)
			s.Family = 4
			if r.Family == unix.AF_INET6 {
				s.Family = 6
			}
		}
		for _, e := range r.Entries {
			se, err := fromNetlink(s.Type, e)
			if err != nil {
				return nil, fmt.Errorf("ipset %s: %w", r.SetName, err)
			}
			s.Entries = append(s.Entries, se)
		}
		out[r.SetName] = s
	}
	return out, nil
}

func (k *NetlinkKernel) Create(spec desired.SetSpec) error {
	fam := uint8(unix.AF_INET)
	if spec.Family == 6 {
		fam = unix.AF_INET6
	}
	return k.h.IpsetCreate(spec.Name, string(spec.Type), netlink.IpsetCreateOptions{Family: fam, MaxElements: maxElements})
}

func (k *NetlinkKernel) Destroy(name string) error { return k.h.IpsetDestroy(name) }

func (k *NetlinkKernel) Add(set string, e desired.SetEntry) error {
	return k.h.IpsetAdd(set, toNetlink(e))
}

func (k *NetlinkKernel) Del(set string, e desired.SetEntry) error {
	return k.h.IpsetDel(set, toNetlink(e))
}

func toNetlink(e desired.SetEntry) *netlink.IPSetEntry {
	n := &netlink.IPSetEntry{}
	switch {
	case e.IP.IsValid():
		n.IP = net.IP(e.IP.AsSlice())
	case e.Net.IsValid(): // hash:net
		n.IP = net.IP(e.Net.Addr().AsSlice())
		n.CIDR = uint8(e.Net.Bits())
		return n
	}
	if e.Port != 0 {
		proto, port := protoNum(e.Proto), e.Port
		n.Protocol, n.Port = &proto, &port
	}
	switch {
	case e.IP2.IsValid():
		n.IP2 = net.IP(e.IP2.AsSlice())
	case e.Net.IsValid(): // hash:ip,port,net
		n.IP2 = net.IP(e.Net.Addr().AsSlice())
		n.CIDR2 = uint8(e.Net.Bits())
	}
	return n
}

func fromNetlink(t desired.SetType, n netlink.IPSetEntry) (desired.SetEntry, error) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return desired.SetEntry{}, fmt.Errorf("entry without an address: %+v", n)
	}
	ip = ip.Unmap()
	var e desired.SetEntry
	switch t {
	case desired.HashNet:
		bits := int(n.CIDR)
		if bits == 0 {
			bits = ip.BitLen()
		}
		e.Net = netip.PrefixFrom(ip, bits)
		return e, nil
	case desired.HashIP:
		e.IP = ip
		return e, nil
	}
	e.IP = ip
	if n.Port != nil && n.Protocol != nil {
		e.Port = *n.Port
		e.Proto = config.TCP
		if *n.Protocol == syscall.IPPROTO_UDP {
			e.Proto = config.UDP
		}
	}
	ip2, ok := netip.AddrFromSlice(n.IP2)
	switch {
	case t == desired.HashIPPortIP && ok:
		e.IP2 = ip2.Unmap()
	case t == desired.HashIPPortNT && ok:
		bits := int(n.CIDR2)
		if bits == 0 {
			bits = ip2.Unmap().BitLen()
		}
		e.Net = netip.PrefixFrom(ip2.Unmap(), bits)
	}
	return e, nil
}
