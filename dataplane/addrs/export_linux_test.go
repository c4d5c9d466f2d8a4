package addrs

import (
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// OpenKernelKind opens a NetlinkKernel in the namespace ns that creates and
// accepts links of another type than dummy: the hosts that run the unit
// tests may lack the dummy module, not bridges.
func OpenKernelKind(ns netns.NsHandle, kind string) (*NetlinkKernel, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &NetlinkKernel{h: h, kind: kind}, nil
}
