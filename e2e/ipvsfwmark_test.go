//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// TestIPVSFWMarkKeys writes firewall-mark virtual servers of both families
// and destinations forwarded by NAT, direct routing and IPIP through both
// of lbd's writers (one call per object, batched) and reads them back with
// NetlinkKernel.Dump: the kernel names such a service by family and mark
// alone, and /proc/net/ip_vs by its mark alone, so the conversion both
// ways is what this proves.
func TestIPVSFWMarkKeys(t *testing.T) {
	requireIPVSForBatch(t)
	dr, ipip := lvs.Forward{Method: lvs.DR}, lvs.Forward{Method: lvs.Tunnel}
	want := []ipvs.Service{
		{Key: lvs.FWMarkKey(7, lvs.IPv4), Scheduler: "wrr", Netmask: 0xffffffff,
			Dests: []ipvs.Dest{{Addr: netip.MustParseAddrPort("198.19.0.1:0"), Weight: 2, Forward: dr}, {Addr: netip.MustParseAddrPort("198.19.0.2:0"), Weight: 1, Forward: ipip}}},
		// The same mark in the other family is another virtual server.
		{Key: lvs.FWMarkKey(7, lvs.IPv6), Scheduler: "rr", Netmask: 128,
			Dests: []ipvs.Dest{{Addr: netip.MustParseAddrPort("[2001:db8:19::1]:0"), Weight: 3}}},
		{Key: lvs.FWMarkKey(9, lvs.IPv4), Scheduler: "rr", Netmask: 0xffffffff},
		// An address service beside them: its destinations come from /proc.
		{Key: key("198.18.0.1", 80, lvs.TCP), Scheduler: "rr", Netmask: 0xffffffff,
			Dests: []ipvs.Dest{{Addr: netip.MustParseAddrPort("198.19.0.3:80"), Weight: 1, Forward: dr}, {Addr: netip.MustParseAddrPort("198.19.0.4:8080"), Weight: 1}}},
	}
	svcFile := filepath.Join(t.TempDir(), "services.json")
	writeJSON(t, svcFile, want)
	for _, method := range []string{"seq", "batch"} {
		t.Run(method, func(t *testing.T) {
			ns := newBatchNetns(t)
			defer ns.drop(t)
			res := ns.role(t, ipvsBatchReq{Services: svcFile, Method: method})
			for i, e := range res.Errors {
				if e != "" {
					t.Errorf("writing %s: %s", want[i].Key, e)
				}
			}
			saved := ns.exec(t, "ipvsadm", "-Sn")
			for _, line := range []string{"-A -f 7 ", "-A -f 9 ", "-a -f 7 -r 198.19.0.1:0 -g -w 2", "-a -f 7 -r 198.19.0.2:0 -i -w 1 --tun-type ipip", "-r 198.19.0.3:80 -g -w 1"} {
				if !strings.Contains(saved, line) {
					t.Errorf("ipvsadm -Sn lacks %q:\n%s", line, saved)
				}
			}
			got := ns.role(t, ipvsBatchReq{Services: svcFile, Method: "dump"}).Dump
			slices.SortFunc(got, func(a, b ipvs.Service) int { return a.Key.Compare(b.Key) })
			for _, s := range got { // /proc lists them in the kernel's order
				slices.SortFunc(s.Dests, func(a, b ipvs.Dest) int { return a.Addr.Compare(b.Addr) })
			}
			sorted := slices.Clone(want)
			slices.SortFunc(sorted, func(a, b ipvs.Service) int { return a.Key.Compare(b.Key) })
			if g, w := fmt.Sprint(got), fmt.Sprint(sorted); g != w {
				t.Errorf("dump:\n%s\nwant:\n%s\nipvsadm -Sn:\n%s", g, w, saved)
			}
		})
	}
}
