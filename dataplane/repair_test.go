package dataplane_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

func TestRepairIsAFullSyncWithinMinSyncPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv, ka := &fakeipvs.Kernel{}, &fakeaddrs.Kernel{}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Addrs: addrs.New(ka, "lbd0"), Sync: cfg.Sync})
		setConfig(dp, cfg)
		synctest.Wait()
		setConfig(dp, parse(t, strings.Replace(conf, "%d", "4", 1))) // spends the burst
		synctest.Wait()
		if err := ka.Delete("lbd0", netip.MustParseAddr("192.0.2.10")); err != nil {
			t.Fatal(err)
		}
		dp.Repair()
		synctest.Wait()
		if strings.Contains(ka.String(), "192.0.2.10") { // the burst is spent: it waits for the rate
			t.Fatalf("repaired before min_sync_period: %s", ka)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if last := dp.Last(); ka.String() != "lbd0: 192.0.2.10\n" || last.Reason.String() != "drift" || last.Dumps == 0 {
			t.Errorf("after Repair and min_sync_period: %+v\n%s", last, ka)
		}
	})
}

// expectingAddrs asks the dataplane what it expects of some addresses
// while a sync applies its VIPs.
type expectingAddrs struct {
	dataplane.AddrApplier
	dp    **dataplane.Dataplane
	asked []netip.Addr
	got   []bool // per address: bound expected, unbound expected
}

func (e *expectingAddrs) Apply(vips []netip.Addr, full bool) (addrs.Stats, error) {
	e.got = e.got[:0]
	for _, a := range e.asked {
		e.got = append(e.got, (*e.dp).ExpectsVIP(a, true), (*e.dp).ExpectsVIP(a, false))
	}
	return e.AddrApplier.Apply(vips, full)
}

func TestExpectsVIP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		oldVIP, newVIP, other := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.99")
		var dp *dataplane.Dataplane
		ea := &expectingAddrs{AddrApplier: addrs.New(&fakeaddrs.Kernel{}, "lbd0"), dp: &dp, asked: []netip.Addr{oldVIP, newVIP, other}}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp = start(t, dataplane.Options{IPVS: ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{}), Addrs: ea, Sync: cfg.Sync})
		check := func(when string, want []bool) {
			t.Helper()
			var got []bool
			for _, a := range ea.asked {
				got = append(got, dp.ExpectsVIP(a, true), dp.ExpectsVIP(a, false))
			}
			if want != nil && !slices.Equal(got, want) {
				t.Errorf("%s: bound/unbound expected for %v = %v, want %v", when, ea.asked, got, want)
			}
		}
		check("before the first sync", []bool{true, true, true, true, true, true})
		setConfig(dp, cfg)
		synctest.Wait()
		check("after the first sync", []bool{true, false, false, true, false, true})

		setConfig(dp, parse(t, strings.Replace(strings.Replace(conf, "%d", "3", 1), "192.0.2.10", "192.0.2.11", 1)))
		synctest.Wait()
		// While the VIP moves, lbd may have either address bound or not;
		// a third one is never expected on the link.
		if want := []bool{true, true, true, true, false, true}; !slices.Equal(ea.got, want) {
			t.Errorf("during the sync that moves the VIP: %v, want %v", ea.got, want)
		}
		check("after it", []bool{false, true, true, false, false, true})
	})
}
