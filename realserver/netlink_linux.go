package realserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// NetlinkKernel is the box's kernel: rtnetlink for links and addresses,
// generic netlink for fou, files under /proc/sys for sysctls, modprobe
// for modules. It works in the network namespace of the thread that
// opened it (sysctls: of the thread that reads them).
type NetlinkKernel struct {
	h       *netlink.Handle
	sysRoot string
}

var _ Kernel = (*NetlinkKernel)(nil)

// OpenKernel opens netlink sockets in the current network namespace;
// sysRoot is normally /proc/sys.
func OpenKernel(sysRoot string) (*NetlinkKernel, error) {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening netlink sockets: %w", err)
	}
	return &NetlinkKernel{h: h, sysRoot: sysRoot}, nil
}

// Close releases the sockets.
func (k *NetlinkKernel) Close() { k.h.Close() }

// Read takes the snapshot Check judges.
func (k *NetlinkKernel) Read() (State, error) {
	var st State
	links, err := k.h.LinkList()
	if err != nil {
		return st, fmt.Errorf("listing links: %w", err)
	}
	names := make(map[int]string, len(links))
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		st.Links = append(st.Links, Link{
			Name:     a.Name,
			Up:       a.Flags&net.FlagUp != 0,
			Loopback: a.Flags&net.FlagLoopback != 0,
			NoARP:    a.RawFlags&unix.IFF_NOARP != 0,
		})
	}
	addrs, err := k.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return st, fmt.Errorf("listing addresses: %w", err)
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ones, _ := a.Mask.Size()
		st.Addrs = append(st.Addrs, Addr{Link: names[a.LinkIndex], Prefix: netip.PrefixFrom(ip.Unmap(), ones)})
	}
	if st.Fou, err = k.fouPorts(); err != nil {
		return st, err
	}
	st.Sysctls = make(map[string]string)
	for _, key := range StateKeys(st.Links) {
		b, err := os.ReadFile(filepath.Join(k.sysRoot, key))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return st, fmt.Errorf("reading %s: %w", sysctlName(key), err)
		default:
			st.Sysctls[key] = strings.TrimSpace(string(b))
		}
	}
	return st, nil
}

// fouPorts lists the fou ports, or none when the fou module is not
// loaded: the family is looked for in the list of families, because
// asking for it by name would load the module.
func (k *NetlinkKernel) fouPorts() ([]FouPort, error) {
	fams, err := k.h.GenlFamilyList()
	if err != nil {
		return nil, fmt.Errorf("listing generic netlink families: %w", err)
	}
	loaded := false
	for _, f := range fams {
		loaded = loaded || f.Name == netlink.FOU_GENL_NAME
	}
	if !loaded {
		return nil, nil
	}
	var out []FouPort
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		fs, err := k.h.FouList(fam)
		if err != nil {
			return nil, fmt.Errorf("listing fou ports: %w", err)
		}
		for _, f := range fs {
			out = append(out, FouPort{Port: uint16(f.Port), V6: f.Family == netlink.FAMILY_V6, GUE: f.EncapType == netlink.FOU_ENCAP_GUE})
		}
	}
	return out, nil
}

// Apply makes one change.
func (k *NetlinkKernel) Apply(a Action) error {
	switch a.Kind {
	case LoadModule:
		if out, err := exec.Command("modprobe", a.Module).CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	case SetSysctl:
		return os.WriteFile(filepath.Join(k.sysRoot, a.Key), []byte(a.Value), 0o644)
	case LinkUp, LinkDown:
		l, err := k.h.LinkByName(a.Link)
		if err != nil {
			return err
		}
		if a.Kind == LinkUp {
			return k.h.LinkSetUp(l)
		}
		return k.h.LinkSetDown(l)
	case AddFou:
		return fouRequest(fouCmdAdd, a.Port, a.V6)
	case DelFou:
		return fouRequest(fouCmdDel, a.Port, a.V6)
	case AddAddr, DelAddr:
		return k.addr(a)
	}
	return fmt.Errorf("unknown action %s", a.Kind)
}

func (k *NetlinkKernel) addr(a Action) error {
	l, err := k.h.LinkByName(a.Link)
	if err != nil {
		return err
	}
	p := a.Prefix
	na := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if a.Kind == DelAddr {
		return k.h.AddrDel(l, na)
	}
	if p.Addr().Is6() {
		// Duplicate address detection would only delay the address (lo
		// does none, a tunnel device might).
		na.Flags = unix.IFA_F_NODAD
	}
	return k.h.AddrAdd(l, na)
}
