package dataplane_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/lvs"
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
	web := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: "tcp"}
	old := lvs.Key{Addr: netip.MustParseAddr("192.0.2.99"), Port: 80, Protocol: "tcp"}
	kv := &fakeipvs.Kernel{}
	for _, k := range []lvs.Key{web, old} {
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
	ops, _, err := dataplane.DryRun(dataplane.FirstSync{Sources: dataplane.Sources{Config: cfg, Edition: "1"}}, dataplane.DiffKernels{IPVS: kv, Ledger: &fakeipvs.Ledger{Keys: map[lvs.Key]bool{old: true, web: true}}, Addrs: ka})
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

// linkFake is the fake address table with the link lookup a dry run asks
// for; err, when set, is what the lookup answers.
type linkFake struct {
	*fakeaddrs.Kernel
	err error
}

func (k linkFake) LinkExists(name string) (bool, error) {
	_, ok := k.Links[name]
	return ok, k.err
}

func TestDiffCreatesTheDummyLink(t *testing.T) {
	cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
`)
	vip := netip.MustParseAddr("192.0.2.10")
	tests := []struct {
		name    string
		addrs   func() addrs.Kernel
		want    []string
		wantErr string
	}{
		{
			name:  "missing link",
			addrs: func() addrs.Kernel { return linkFake{Kernel: &fakeaddrs.Kernel{}} },
			want:  []string{"+ ip link add lbd0 type dummy", "+ ip addr add 192.0.2.10/32 dev lbd0"},
		},
		{
			name: "link there",
			addrs: func() addrs.Kernel {
				return linkFake{Kernel: &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{"lbd0": {vip: true}}}}
			},
		},
		{
			name: "link of another type",
			addrs: func() addrs.Kernel {
				return linkFake{Kernel: &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{"lbd0": {}}}, err: errors.New("lbd0 exists and is a veth link, not dummy")}
			},
			wantErr: "dummy interface lbd0: lbd0 exists and is a veth link",
		},
		{
			// A kernel that cannot tell is taken to have the link.
			name:  "no link lookup",
			addrs: func() addrs.Kernel { return &fakeaddrs.Kernel{} },
			want:  []string{"+ ip addr add 192.0.2.10/32 dev lbd0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka := tt.addrs()
			ops, _, err := dataplane.DryRun(dataplane.FirstSync{Sources: dataplane.Sources{Config: cfg, Edition: "1"}}, dataplane.DiffKernels{IPVS: &fakeipvs.Kernel{}, Ledger: &fakeipvs.Ledger{}, Addrs: ka})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var addrOps []string
			for _, op := range ops {
				if strings.HasPrefix(op, "+ ip ") || strings.HasPrefix(op, "- ip ") {
					addrOps = append(addrOps, op)
				}
			}
			if !slices.Equal(addrOps, tt.want) {
				t.Errorf("address changes %q, want %q", addrOps, tt.want)
			}
			if f, ok := ka.(linkFake); ok {
				if _, writes := f.Counts(); writes != 0 {
					t.Errorf("a dry run wrote %d times to the address table", writes)
				}
			}
		})
	}
}
