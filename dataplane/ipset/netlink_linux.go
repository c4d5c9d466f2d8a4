package ipset

import (
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// maxElements bounds each set; the kernel's default (65536) is too small
// for source ranges of many services.
const maxElements = 1 << 20

// NetlinkKernel drives ipsets over three reused netlink sockets:
// vishvananda's for creating, destroying and single writes, one of its own
// for dumps (dump_linux.go) and one for batched writes (batch_linux.go).
type NetlinkKernel struct {
	h     *netlink.Handle
	dump  *nfSocket
	batch *batchWriter
}

var (
	_ Kernel  = (*NetlinkKernel)(nil)
	_ Batcher = (*NetlinkKernel)(nil)
)

// OpenKernel opens the netfilter netlink sockets in the current namespace.
func OpenKernel() (*NetlinkKernel, error) {
	return OpenKernelIn(netns.None())
}

// OpenKernelIn opens the sockets in another namespace (tests).
func OpenKernelIn(ns netns.NsHandle) (*NetlinkKernel, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	d, err := openNFSocket(ns, "ipset-dump")
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	w, err := openBatchWriter(ns)
	if err != nil {
		h.Close()
		d.close()
		return nil, fmt.Errorf("opening ipset netlink socket: %w", err)
	}
	return &NetlinkKernel{h: h, dump: d, batch: w}, nil
}

// Close releases the sockets.
func (k *NetlinkKernel) Close() {
	k.h.Close()
	k.dump.close()
	k.batch.s.close()
}

func (k *NetlinkKernel) Create(spec desired.SetSpec) error {
	fam := uint8(unix.AF_INET)
	if spec.Family == 6 {
		fam = unix.AF_INET6
	}
	return k.h.IpsetCreate(spec.Name, string(spec.Type), netlink.IpsetCreateOptions{Family: fam, MaxElements: maxElements, Skbinfo: spec.SkbInfo})
}

func (k *NetlinkKernel) Destroy(name string) error { return k.h.IpsetDestroy(name) }

// Add and Del write an entry with a mark (vishvananda's IPSetEntry cannot
// say skbmark) as the batch writer encodes it.
func (k *NetlinkKernel) Add(set string, e desired.SetEntry) error {
	if e.Mark != 0 {
		return k.Write([]Op{{Set: set, Entry: e}})[0]
	}
	return k.h.IpsetAdd(set, toNetlink(e))
}

func (k *NetlinkKernel) Del(set string, e desired.SetEntry) error {
	if e.Mark != 0 {
		return k.Write([]Op{{Set: set, Entry: e, Del: true}})[0]
	}
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
