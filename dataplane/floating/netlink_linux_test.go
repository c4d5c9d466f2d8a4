package floating_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/floating"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// On a real kernel, in a fresh namespace, on a veth link that has an
// address of its own: the floating addresses come and go, the own one
// stays, and an IPv6 one is usable at once (no DAD).
func TestNetlinkKernel(t *testing.T) {
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	testnetns.Run(t, ns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p")
	testnetns.Run(t, ns, "ip", "link", "set", "eth1", "up")
	testnetns.Run(t, ns, "ip", "link", "set", "eth1p", "up")
	testnetns.Run(t, ns, "ip", "addr", "add", "198.18.3.2/24", "dev", "eth1")
	k, err := floating.OpenKernelAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	a := floating.New(k)
	fl := []desired.Floating{
		{Prefix: netip.MustParsePrefix("198.18.3.1/24"), Link: "eth1"},
		{Prefix: netip.MustParsePrefix("2001:2:0:3::1/64"), Link: "eth1"},
	}
	if _, err := a.Apply(fl, true); err != nil {
		t.Fatal(err)
	}
	got := testnetns.Run(t, ns, "ip", "addr", "show", "dev", "eth1")
	for _, want := range []string{"198.18.3.2/24", "198.18.3.1/24", "2001:2:0:3::1/64"} {
		if !strings.Contains(got, want) {
			t.Errorf("eth1 lacks %s:\n%s", want, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		if strings.Contains(line, "2001:2:0:3::1/") && strings.Contains(line, "tentative") {
			t.Errorf("the IPv6 floating address is tentative (DAD):\n%s", got)
		}
	}
	for i := range fl {
		fl[i].Held = true
	}
	if _, err := a.Apply(fl, true); err != nil {
		t.Fatal(err)
	}
	got = testnetns.Run(t, ns, "ip", "addr", "show", "dev", "eth1")
	if strings.Contains(got, "198.18.3.1/") || strings.Contains(got, "2001:2:0:3::1/") || !strings.Contains(got, "198.18.3.2/24") {
		t.Errorf("eth1 after the addresses were held:\n%s", got)
	}
}
