package addrs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// TestNetlinkKernelOwnsOnlyItsLink runs the netlink code on a real kernel,
// in a fresh namespace, with bridges standing in for dummy links.
func TestNetlinkKernelOwnsOnlyItsLink(t *testing.T) {
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	open := func() *addrs.NetlinkKernel {
		k, err := addrs.OpenKernelKind(h, "bridge")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(k.Close)
		return k
	}
	link := func(name string) string { return testnetns.Run(t, ns, "ip", "-d", "addr", "show", "dev", name) }
	k := open()

	// lbd creates its link, marked.
	if _, err := addrs.New(k, "lbd0").Apply(ips("192.0.2.10", "2001:db8::10"), true); err != nil {
		t.Fatal(err)
	}
	if got := link("lbd0"); !strings.Contains(got, "alias "+addrs.Marker) || !strings.Contains(got, "192.0.2.10/32") || !strings.Contains(got, "2001:db8::10/128") {
		t.Errorf("lbd0 after the first sync:\n%s", got)
	}

	// Another program's link of the configured name: refused, untouched.
	testnetns.Run(t, ns, "ip", "link", "add", "dummy0", "type", "bridge")
	testnetns.Run(t, ns, "ip", "addr", "add", "203.0.113.1/32", "dev", "dummy0")
	before := link("dummy0")
	var foreign *addrs.ForeignLinkError
	if _, err := addrs.New(k, "dummy0").Apply(ips("192.0.2.20"), true); !errors.As(err, &foreign) || !strings.Contains(err.Error(), "ip link set dummy0 alias") {
		t.Errorf("sync on someone else's link: %v; want it refused with the fix", err)
	}
	if removed, err := k.DeleteLink("dummy0"); removed || !errors.As(err, &foreign) {
		t.Errorf("cleanup of someone else's link: %v, %v; want it refused", removed, err)
	}
	if after := link("dummy0"); after != before {
		t.Errorf("someone else's link changed:\n%s\nwas:\n%s", after, before)
	}

	// After an upgrade, the unmarked link an older lbd made is adopted.
	a := addrs.New(open(), "dummy0")
	a.AdoptUnmarked = true
	if _, err := a.Apply(ips("192.0.2.20"), true); err != nil {
		t.Fatal(err)
	}
	if got := link("dummy0"); !strings.Contains(got, "alias "+addrs.Marker) || strings.Contains(got, "203.0.113.1") || !strings.Contains(got, "192.0.2.20/32") {
		t.Errorf("adopted link:\n%s", got)
	}

	// A link handed to lbd by hand, and lbd's own after a restart, are used.
	testnetns.Run(t, ns, "ip", "link", "add", "byhand0", "type", "bridge")
	testnetns.Run(t, ns, "ip", "link", "set", "byhand0", "alias", "lbd: handed over")
	restarted := open()
	for _, name := range []string{"byhand0", "lbd0"} {
		st, err := addrs.New(restarted, name).Apply(ips("192.0.2.10"), true)
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if name == "lbd0" && st.Writes != 1 { // 2001:db8::10 unbound
			t.Errorf("lbd0 after a restart: %+v; want only the removed VIP unbound", st)
		}
	}

	// Cleanup deletes lbd's links only.
	for _, name := range []string{"lbd0", "byhand0", "dummy0"} {
		if removed, err := restarted.DeleteLink(name); !removed || err != nil {
			t.Errorf("deleting %s: %v, %v", name, removed, err)
		}
	}
	if removed, err := restarted.DeleteLink("lbd0"); removed || err != nil {
		t.Errorf("deleting a missing link: %v, %v; want nothing, no error", removed, err)
	}
	if got := testnetns.Run(t, ns, "ip", "-br", "link"); strings.Contains(got, "lbd0") || strings.Contains(got, "dummy0") {
		t.Errorf("links left:\n%s", got)
	}
}
