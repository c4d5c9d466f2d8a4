package dataplane_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

func TestDiffPrintsWhatAFullSyncWouldWrite(t *testing.T) {
	cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1", weight = 2 }, { address = "10.0.0.3" }]
[[service]]
name = "dns"
vips = ["192.0.2.53"]
port = 53
protocol = "udp"
scheduler = "rr"
`)
	web := desired.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: "tcp"}
	old := desired.Key{Addr: netip.MustParseAddr("192.0.2.99"), Port: 80, Protocol: "tcp"}
	kv := &fakeipvs.Kernel{}
	for _, k := range []desired.Key{web, old} {
		if err := kv.AddService(ipvs.Service{Key: k, Scheduler: "wrr", Netmask: 0xffffffff}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []ipvs.Dest{{Addr: netip.MustParseAddrPort("10.0.0.1:80"), Weight: 1}, {Addr: netip.MustParseAddrPort("10.0.0.2:80"), Weight: 1}} {
		if err := kv.AddDest(web, d); err != nil {
			t.Fatal(err)
		}
	}
	ka := &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{"lbd0": {netip.MustParseAddr("192.0.2.99"): true}}}
	before := kv.String()
	ops, err := dataplane.Diff(cfg, desired.Compute(desired.Input{Config: cfg}), dataplane.DiffKernels{IPVS: kv, Ledger: &fakeipvs.Ledger{Keys: map[desired.Key]bool{old: true}}, Addrs: ka})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"+ ip addr add 192.0.2.10/32 dev lbd0",
		"+ ip addr add 192.0.2.53/32 dev lbd0",
		"- ip addr del 192.0.2.99/32 dev lbd0",
		"~ -e -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 2",
		"+ -a -t 192.0.2.10:80 -r 10.0.0.3:80 -m -w 1",
		"~ -e -t 192.0.2.10:80 -r 10.0.0.2:80 -m -w 0",
		"+ -A -u 192.0.2.53:53 -s rr",
		"- -D -t 192.0.2.99:80",
	}
	if !slices.Equal(ops, want) {
		t.Errorf("diff:\n%q\nwant:\n%q", ops, want)
	}
	if kv.String() != before {
		t.Errorf("a dry run wrote to the kernel")
	}
}
