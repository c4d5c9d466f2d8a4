package genl

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestConstants checks the package's own copies of the kernel's numbers
// (kept so that encoding and decoding build everywhere).
func TestConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want int
	}{
		{"NetlinkHeaderLen", NetlinkHeaderLen, unix.NLMSG_HDRLEN},
		{"HeaderLen", HeaderLen, unix.GENL_HDRLEN},
		{"attrHeaderLen", attrHeaderLen, unix.NLA_HDRLEN},
		{"nlmsgError", nlmsgError, unix.NLMSG_ERROR},
		{"nlaFNested", nlaFNested, unix.NLA_F_NESTED},
		{"nlaFNetByteorder", nlaFNetByteorder, unix.NLA_F_NET_BYTEORDER},
		{"nlmFRequest", nlmFRequest, unix.NLM_F_REQUEST},
		{"nlmFAck", nlmFAck, unix.NLM_F_ACK},
		{"nlmFDumpIntr", nlmFDumpIntr, unix.NLM_F_DUMP_INTR},
		{"ctrlID", ctrlID, unix.GENL_ID_CTRL},
		{"ctrlCmdGetFamily", ctrlCmdGetFamily, unix.CTRL_CMD_GETFAMILY},
		{"ctrlAttrFamilyID", ctrlAttrFamilyID, unix.CTRL_ATTR_FAMILY_ID},
		{"ctrlAttrFamilyName", ctrlAttrFamilyName, unix.CTRL_ATTR_FAMILY_NAME},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}

// openOrSkip opens a Conn, skipping the test where the sandbox has no
// generic netlink (no root is needed otherwise).
func openOrSkip(t *testing.T, o Options) *Conn {
	t.Helper()
	c, err := Open(o)
	if err != nil {
		t.Skipf("no generic netlink here: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestResolveFamily asks the kernel for the controller's own family
// ("nlctrl", always GENL_ID_CTRL), which needs neither root nor IPVS.
func TestResolveFamily(t *testing.T) {
	openOrSkip(t, Options{})
	id, err := ResolveFamily("nlctrl")
	if err != nil {
		t.Fatal(err)
	}
	if id != ctrlID {
		t.Errorf("nlctrl is family %#x, want %#x", id, ctrlID)
	}
	// (A name of 16 bytes or more would fail the attribute's policy
	// instead, with EINVAL.)
	_, err = ResolveFamily("lbd-nosuchfam")
	if !errors.Is(err, unix.ENOENT) {
		t.Errorf("unknown family: %v, want ENOENT", err)
	}
	if err != nil && err.Error() != "looking up the lbd-nosuchfam generic netlink family: no such file or directory" {
		t.Errorf("unknown family: %q", err)
	}
}

func TestRecvTimeout(t *testing.T) {
	c := openOrSkip(t, Options{CapAck: true, RecvBuf: 1 << 20, SendBuf: 1 << 20, RecvTimeout: 20 * time.Millisecond})
	start := time.Now()
	_, err := c.Recv()
	if !errors.Is(err, unix.EAGAIN) {
		t.Errorf("Recv with nothing to receive: %v, want EAGAIN", err)
	}
	if d := time.Since(start); d < 10*time.Millisecond {
		t.Errorf("Recv returned after %v", d)
	}
}
