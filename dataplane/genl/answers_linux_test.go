package genl

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Against the kernel's generic netlink controller, which every Linux has
// and answers without privileges: a request for an unknown family is
// answered with an error (ENOENT; some kernels EINVAL), a known one
// acknowledged; a dump of every family ends and holds the controller.
func TestReadAckAndDump(t *testing.T) {
	c, err := Open(Options{RecvTimeout: 5 * time.Second})
	if err != nil {
		t.Skipf("no generic netlink socket here: %v", err)
	}
	defer c.Close()
	for _, tt := range []struct {
		name  string
		known bool
	}{{"nlctrl", true}, {"no-such-family-lbd", false}} {
		var e Encoder
		encodeGetFamily(&e, 7, tt.name)
		if err := c.Send(e.Encoded()); err != nil {
			t.Fatal(err)
		}
		// The controller answers the request itself, then acknowledges it.
		err := c.ReadAck(7)
		var errno syscall.Errno
		if tt.known != (err == nil) || (err != nil && !errors.As(err, &errno)) {
			t.Errorf("%s: ReadAck = %v; want an acknowledgement for a known family, an errno otherwise", tt.name, err)
		}
	}
	var e Encoder
	start := e.Begin(ctrlID, nlmFRequest|unix.NLM_F_DUMP, 8, ctrlCmdGetFamily, ctrlVersion)
	e.End(start)
	if err := c.Send(e.Encoded()); err != nil {
		t.Fatal(err)
	}
	var names []string
	err = c.ReadDump(8, ctrlID, func(m Message) error {
		for typ, v := range Attrs(m.Payload[HeaderLen:]) {
			if typ == ctrlAttrFamilyName {
				names = append(names, strings.TrimRight(string(v), "\x00"))
			}
		}
		return nil
	})
	if err != nil || !strings.Contains(strings.Join(names, " "), "nlctrl") {
		t.Errorf("ReadDump: %v, families %v; want nlctrl among them", err, names)
	}
}
