package ownership_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/lvs"
)

func TestCleanupRemovesOnlyWhatLbdOwns(t *testing.T) {
	mine := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	theirs := lvs.Key{Addr: netip.MustParseAddr("192.0.2.11"), Port: 80, Protocol: lvs.TCP}
	gone := lvs.Key{Addr: netip.MustParseAddr("192.0.2.12"), Port: 80, Protocol: lvs.TCP}
	kv := &fakeipvs.Kernel{}
	for _, k := range []lvs.Key{mine, theirs} {
		if err := kv.AddService(ipvs.Service{Key: k, Scheduler: "rr"}); err != nil {
			t.Fatal(err)
		}
	}
	ledger := &fakeipvs.Ledger{Keys: map[lvs.Key]bool{mine: true, gone: true}}
	links := &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{
		"lbd0": {netip.MustParseAddr("192.0.2.10"): true},
		"eth0": {netip.MustParseAddr("198.51.100.1"): true},
	}}
	done, err := ownership.Cleanup(kv, ledger, links, "lbd0")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"IPVS virtual server 192.0.2.10:80/tcp", "dummy interface lbd0 and its VIPs"}
	if !slices.Equal(done, want) {
		t.Errorf("removed %q; want %q", done, want)
	}
	if kv.String() != "192.0.2.11:80/tcp rr flags=0x0 timeout=0\n" || links.String() != "eth0: 198.51.100.1\n" || len(ledger.Keys) != 0 {
		t.Errorf("after cleanup:\n%s%s ledger %v", kv, links, ledger.Keys)
	}
	// A second run finds nothing.
	if done, err := ownership.Cleanup(kv, ledger, links, "lbd0"); err != nil || len(done) != 0 {
		t.Errorf("second cleanup: %v, %v", done, err)
	}
}

// Someone else's link of lbd's name survives cleanup, which says so and
// does not fail for it.
func TestCleanupLeavesAForeignLink(t *testing.T) {
	links := &fakeaddrs.Kernel{
		Links:    map[string]map[netip.Addr]bool{"dummy0": {netip.MustParseAddr("203.0.113.1"): true}},
		Unmarked: map[string]bool{"dummy0": true},
	}
	done, err := ownership.Cleanup(&fakeipvs.Kernel{}, &fakeipvs.Ledger{}, links, "dummy0")
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 1 || !strings.HasPrefix(done[0], "nothing of interface dummy0: interface dummy0 was not created by lbd") {
		t.Errorf("cleanup said %q", done)
	}
	if links.String() != "dummy0: 203.0.113.1\n" {
		t.Errorf("the foreign link changed:\n%s", links)
	}
}
