package realserver

import (
	"fmt"
	"time"

	"github.com/lbdproject/lbd/dataplane/genl"
	"golang.org/x/sys/unix"
)

// fou's generic netlink numbers (include/uapi/linux/fou.h).
const (
	fouGenlName    = "fou"
	fouGenlVersion = 1
	fouCmdAdd      = 1
	fouCmdDel      = 2
	fouAttrPort    = 1 // be16
	fouAttrAF      = 2 // u8
	fouAttrType    = 4 // u8
	fouEncapGUE    = 2
)

// fouRequest adds or deletes a GUE receive port, as `ip fou add port P
// gue` does: port, type and family only. (vishvananda/netlink's FouAdd
// also sends an IP protocol, and Linux 6.1 answers that with ERANGE.)
func fouRequest(cmd uint8, port uint16, v6 bool) error {
	family, err := genl.ResolveFamily(fouGenlName)
	if err != nil {
		return fmt.Errorf("the fou generic netlink family (module fou): %w", err)
	}
	c, err := genl.Open(genl.Options{CapAck: true, RecvTimeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	var e genl.Encoder
	const seq = 1
	start := e.Begin(family, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, cmd, fouGenlVersion)
	e.BE16(fouAttrPort, port)
	af := uint8(unix.AF_INET)
	if v6 {
		af = unix.AF_INET6
	}
	e.U8(fouAttrAF, af)
	if cmd == fouCmdAdd {
		e.U8(fouAttrType, fouEncapGUE)
	}
	e.End(start)
	if err := c.Send(e.Encoded()); err != nil {
		return err
	}
	return c.ReadAck(seq)
}
