package floating

import (
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// OpenKernelAt opens a NetlinkKernel in the namespace ns.
func OpenKernelAt(ns netns.NsHandle) (*NetlinkKernel, error) {
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	return &NetlinkKernel{h: h}, nil
}
