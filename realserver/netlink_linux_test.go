package realserver_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/internal/netnsrun"
	"github.com/lbdproject/lbd/internal/testnetns"
	"github.com/lbdproject/lbd/realserver"
)

// On a real kernel, in a fresh namespace with a veth link: DR setup binds
// the VIPs on lo and sets the ARP sysctls of that namespace only (the
// net.ipv4.conf tree is per namespace), a second run changes nothing,
// check passes, and undo puts everything back.
func TestNetlinkKernelDR(t *testing.T) {
	ns := testnetns.New(t)
	testnetns.Require(t, "sysctl")
	testnetns.Run(t, ns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "eth1p")
	testnetns.Run(t, ns, "ip", "link", "set", "eth1", "up")
	testnetns.Run(t, ns, "ip", "addr", "add", "198.18.3.2/24", "dev", "eth1")
	hostIgnore, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/arp_ignore")
	if err != nil {
		t.Fatal(err)
	}
	spec := dr("198.18.100.1", "2001:2::100")
	sysctls := func() string {
		return testnetns.Run(t, ns, "sysctl", "net.ipv4.conf.all.arp_ignore", "net.ipv4.conf.all.arp_announce", "net.ipv4.conf.eth1.arp_ignore")
	}
	before := sysctls()
	var rec realserver.Record
	var first, second realserver.Result
	inNS(t, ns, func(k *realserver.NetlinkKernel) error {
		if first, err = realserver.Setup(k, spec, &rec); err != nil {
			return err
		}
		second, err = realserver.Setup(k, spec, &rec)
		return err
	})
	if !first.Report.OK() || len(first.Done) != 4 {
		t.Errorf("setup did %v; report:\n%s", first.Done, strings.Join(lines(first.Report), "\n"))
	}
	if len(second.Done) != 0 || !second.Report.OK() {
		t.Errorf("second setup did %v; report:\n%s", second.Done, strings.Join(lines(second.Report), "\n"))
	}
	lo := testnetns.Run(t, ns, "ip", "addr", "show", "dev", "lo")
	for _, want := range []string{"198.18.100.1/32", "2001:2::100/128"} {
		if !strings.Contains(lo, want) {
			t.Errorf("lo lacks %s:\n%s", want, lo)
		}
	}
	got := sysctls()
	for _, want := range []string{"net.ipv4.conf.all.arp_ignore = 1", "net.ipv4.conf.all.arp_announce = 2"} {
		if !strings.Contains(got, want) {
			t.Errorf("namespace sysctls lack %q:\n%s", want, got)
		}
	}
	if now, _ := os.ReadFile("/proc/sys/net/ipv4/conf/all/arp_ignore"); string(now) != string(hostIgnore) {
		t.Errorf("the host's arp_ignore changed from %q to %q", hostIgnore, now)
	}
	wantLines := []string{"ok lo is up", "ok net.ipv4.conf.all.arp_ignore", "ok arp_ignore on eth1p", "ok arp_ignore on eth1",
		"ok net.ipv4.conf.all.arp_announce", "ok arp_announce on eth1p", "ok arp_announce on eth1",
		"ok VIP 198.18.100.1/32 on lo", "ok VIP 2001:2::100/128 on lo"}
	if !slices.Equal(lines(second.Report), wantLines) {
		t.Errorf("check:\n%s\nwant:\n%s", strings.Join(lines(second.Report), "\n"), strings.Join(wantLines, "\n"))
	}

	inNS(t, ns, func(k *realserver.NetlinkKernel) error {
		_, err := realserver.Undo(k, spec, &rec)
		return err
	})
	if lo := testnetns.Run(t, ns, "ip", "addr", "show", "dev", "lo"); strings.Contains(lo, "198.18.100.1") || strings.Contains(lo, "2001:2::100") {
		t.Errorf("undo left a VIP on lo:\n%s", lo)
	}
	if after := sysctls(); after != before {
		t.Errorf("sysctls after undo:\n%s\nbefore setup:\n%s", after, before)
	}
}

// inNS runs fn with a kernel opened on a thread inside the namespace, where
// /proc/sys/net shows the namespace's sysctls too.
func inNS(t *testing.T, ns string, fn func(*realserver.NetlinkKernel) error) {
	t.Helper()
	err := netnsrun.Do("/run/netns/"+ns, func() error {
		k, err := realserver.OpenKernel("/proc/sys")
		if err != nil {
			return err
		}
		defer k.Close()
		return fn(k)
	})
	if err != nil {
		t.Fatal(err)
	}
}
