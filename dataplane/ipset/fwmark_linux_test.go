package ipset_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// TestMarkedEntriesOnTheKernel writes lbd's skbinfo set on the kernel:
// created with the extension (replacing one of its name without it),
// entries with skbmark as `ipset list` prints them, read back equal (a
// full sync writes nothing), a changed mark, and an entry an admin gave
// another mask, which is not lbd's and is replaced.
func TestMarkedEntriesOnTheKernel(t *testing.T) {
	testnetns.Require(t, "ipset")
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := ipset.OpenKernelIn(h)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	testnetns.Run(t, ns, "ipset", "create", "LBD-FWMARK", "hash:ip,port") // no skbinfo: replaced
	a := ipset.New(k)
	st := markState(t, "7", nil)
	if _, err := a.Apply(&st, true); err != nil {
		t.Fatal(err)
	}
	list := testnetns.Run(t, ns, "ipset", "list", "LBD-FWMARK")
	if !strings.Contains(list, " skbinfo") || !strings.Contains(list, "192.0.2.10,tcp:80 skbmark 0x7\n") || !strings.Contains(list, "192.0.2.10,tcp:443 skbmark 0x7\n") {
		t.Errorf("LBD-FWMARK:\n%s", list)
	}
	if res, err := a.Apply(&st, true); err != nil || res.Writes != 0 {
		t.Errorf("full sync with nothing to change: %+v, %v; want no writes (marks read back equal)", res, err)
	}
	next := markState(t, "4294950911", &st)
	if res, err := a.Apply(&next, false); err != nil || res.Writes != 4 {
		t.Errorf("a changed mark: %+v, %v; want 2 deletes and 2 adds", res, err)
	}
	if list := testnetns.Run(t, ns, "ipset", "list", "LBD-FWMARK"); !strings.Contains(list, "192.0.2.10,tcp:80 skbmark 0xffffbfff\n") {
		t.Errorf("after the mark changed:\n%s", list)
	}
	// Someone's entry with another mask: not what lbd marks.
	testnetns.Run(t, ns, "ipset", "del", "LBD-FWMARK", "192.0.2.10,tcp:80")
	testnetns.Run(t, ns, "ipset", "add", "LBD-FWMARK", "192.0.2.10,tcp:80", "skbmark", "0xffffbfff/0xff")
	if res, err := a.Apply(&next, true); err != nil || res.Writes != 2 {
		t.Errorf("an entry with another mask: %+v, %v; want it deleted and written again", res, err)
	}
	if list := testnetns.Run(t, ns, "ipset", "list", "LBD-FWMARK"); !strings.Contains(list, "192.0.2.10,tcp:80 skbmark 0xffffbfff\n") {
		t.Errorf("after the repair:\n%s", list)
	}
	// One entry at a time (Add, Del) says skbmark too.
	e := desired.SetEntry{IP: netip.MustParseAddr("192.0.2.11"), Proto: "udp", Port: 53, Mark: 5}
	if err := k.Add("LBD-FWMARK", e); err != nil {
		t.Fatal(err)
	}
	if list := testnetns.Run(t, ns, "ipset", "list", "LBD-FWMARK"); !strings.Contains(list, "192.0.2.11,udp:53 skbmark 0x5\n") {
		t.Errorf("after Add:\n%s", list)
	}
	if err := k.Del("LBD-FWMARK", e); err != nil {
		t.Fatal(err)
	}
}
