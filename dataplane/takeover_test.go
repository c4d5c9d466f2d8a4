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
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/floating"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

// TestTakeoverDuringASync: a box becoming master while a sync is under
// way (a periodic full one, seconds at scale) binds and announces its
// addresses at once, and that sync, computed while it was backup, does
// not take them back.
func TestTakeoverDuringASync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inside := netip.MustParsePrefix("198.18.3.1/24")
		backup := []desired.Floating{{Prefix: inside, Link: "eth1", Held: true}}
		master := []desired.Floating{{Prefix: inside, Link: "eth1"}}
		ka := &fakeaddrs.Kernel{}
		ann := &announceRecorder{sets: make(chan map[string][]netip.Addr, 1)}
		g := &gatedIPVS{Applier: ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{})}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := dataplane.New(dataplane.Options{IPVS: g, Addrs: addrs.New(ka, "lbd0"),
			Floating: floating.New(&floatKernel{addrs: map[string][]netip.Prefix{}}), Announce: ann, Sync: cfg.Sync})
		dp.SetFailover(desired.HoldServices(true), backup)
		setConfig(dp, cfg)
		go dp.Loop(t.Context())
		synctest.Wait()
		if got := ka.String(); got != "lbd0: \n" {
			t.Fatalf("as backup: addresses %q, want none", got)
		}

		g.gate = make(chan struct{})
		dp.Repair()
		time.Sleep(time.Second) // min_sync_period
		synctest.Wait()
		if _, running := dp.SyncingSince(); !running {
			t.Fatal("no sync running")
		}
		dp.SetFailover(desired.HoldServices(false), master)
		synctest.Wait() // the sync still waits in the IPVS applier
		const bound = "lbd0: 192.0.2.10\n"
		if got := ka.String(); got != bound {
			t.Errorf("taking over during a sync: addresses %q, want %q before the sync ends", got, bound)
		}
		if vip := netip.MustParseAddr("192.0.2.10"); !dp.ExpectsVIP(vip, true) {
			t.Errorf("drift watching would take the takeover's %v for another's", vip)
		}
		ann.mu.Lock()
		announced := slices.Contains(ann.last["eth1"], inside.Addr())
		ann.mu.Unlock()
		if !announced {
			t.Errorf("taking over during a sync: the inside address is not announced")
		}

		close(g.gate)
		time.Sleep(time.Minute) // the older sync ends, the takeover's follows
		synctest.Wait()
		if got := ka.String(); got != bound {
			t.Errorf("after the syncs: addresses %q, want %q", got, bound)
		}
	})
}
