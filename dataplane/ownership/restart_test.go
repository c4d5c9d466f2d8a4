package ownership

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

var (
	vsWeb = lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	vsAPI = lvs.Key{Addr: netip.MustParseAddr("192.0.2.11"), Port: 80, Protocol: lvs.TCP}
	rsA   = netip.MustParseAddrPort("10.0.0.1:80")
	rsB   = netip.MustParseAddrPort("10.0.0.2:80")
	rsC   = netip.MustParseAddrPort("10.0.0.3:80")
)

func svc(k lvs.Key, dests ...ipvs.Dest) ipvs.Service {
	return ipvs.Service{Key: k, Scheduler: "wrr", Dests: dests}
}

func TestBaseline(t *testing.T) {
	owned := []ipvs.Service{
		svc(vsWeb, ipvs.Dest{Addr: rsB, Weight: 2}, ipvs.Dest{Addr: rsC, Weight: 0}, ipvs.Dest{Addr: rsA, Weight: 1}),
		svc(vsAPI),
	}
	want := []desired.Service{
		{Key: vsWeb, Scheduler: "wrr", Dests: []desired.Dest{{Addr: rsA, Weight: 1}, {Addr: rsB, Weight: 2}}},
		{Key: vsAPI, Scheduler: "wrr"},
	}
	if got := Baseline(owned); !reflect.DeepEqual(got, want) {
		t.Errorf("baseline %+v\nwant     %+v", got, want)
	}
}

func TestApplied(t *testing.T) {
	dir := t.TempDir()
	if h, err := ReadApplied(dir); h != "" || err != nil {
		t.Fatalf("no file: %q, %v; want \"\", nil", h, err)
	}
	for _, h := range []string{"3f2a9c", "77b0e1"} {
		if err := WriteApplied(dir, h); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadApplied(dir); got != h || err != nil {
			t.Errorf("read %q, %v; want %q", got, err, h)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, AppliedFile+".new")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left behind: %v", err)
	}
	if err := WriteApplied(filepath.Join(dir, "missing"), "x"); err == nil {
		t.Errorf("writing into a missing directory did not fail")
	}
}

// TestBaselineKeepsForward checks that a baseline destination forwarded
// other than by NAT says so: a held one goes back as the kernel had it.
func TestBaselineKeepsForward(t *testing.T) {
	dr := lvs.Forward{Method: lvs.DR}
	got := Baseline([]ipvs.Service{svc(vsWeb, ipvs.Dest{Addr: rsA, Weight: 1, Forward: dr}, ipvs.Dest{Addr: rsB, Weight: 1})})
	if d := got[0].Dests; len(d) != 2 || d[0].Forward() != dr || d[1].Forward() != (lvs.Forward{}) || d[0].ConfigWeight() != 1 {
		t.Errorf("baseline destinations %+v; want %s at weight 1, then NAT", d, dr)
	}
}
