package dataplane_test

import (
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

// gatedIPVS is the real IPVS applier whose Apply waits for the test while
// gate is set.
type gatedIPVS struct {
	*ipvs.Applier
	gate chan struct{}
}

func (g *gatedIPVS) Apply(want []desired.Service, full bool) (ipvs.Result, error) {
	if g.gate != nil {
		<-g.gate
	}
	return g.Applier.Apply(want, full)
}

// TestViewDuringASync checks that status reads the kernel as the last sync
// left it while the next sync runs, without waiting for it.
func TestViewDuringASync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gatedIPVS{Applier: ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{})}
		first := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := start(t, dataplane.Options{IPVS: g, Sync: first.Sync})
		if v := dp.View(); v.Kernel != nil {
			t.Errorf("kernel view before the first sync: %v; want nil (unknown)", v.Kernel)
		}
		setConfig(dp, first)
		synctest.Wait()
		rs1 := netip.MustParseAddrPort("10.0.0.1:80")
		key := dp.View().Desired.Services[0].Key
		if w, ok := dp.View().Kernel[key][rs1]; !ok || w != 3 {
			t.Fatalf("kernel view after the first sync: %v; want 10.0.0.1:80 at weight 3", dp.View().Kernel)
		}

		g.gate = make(chan struct{})
		setConfig(dp, parse(t, strings.Replace(conf, "%d", "5", 1)))
		synctest.Wait() // the sync now waits in Apply
		if _, running := dp.SyncingSince(); !running {
			t.Fatal("no sync running")
		}
		if w := dp.View().Kernel[key][rs1]; w != 3 {
			t.Errorf("kernel view during the sync: weight %d; want the last sync's 3", w)
		}
		if c := dp.KernelConns(); len(c[key]) != 2 {
			t.Errorf("connection counts during the sync: %v; want the last sync's two destinations", c)
		}
		close(g.gate)
		synctest.Wait()
		if w := dp.View().Kernel[key][rs1]; w != 5 {
			t.Errorf("kernel view after the sync: weight %d; want 5", w)
		}
	})
}

// gatedAddrs is the real address applier whose Apply waits for the test
// while gate is set.
type gatedAddrs struct {
	*addrs.Applier
	gate chan struct{}
}

func (g *gatedAddrs) Apply(vips []netip.Addr, full bool) (addrs.Stats, error) {
	if g.gate != nil {
		<-g.gate
	}
	return g.Applier.Apply(vips, full)
}

// TestViewAfterIPVSBeforeTheRest checks that the kernel's weights show as
// soon as the IPVS applier has written them, while the other subsystems of
// the same sync still run (traffic may flow by then).
func TestViewAfterIPVSBeforeTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ga := &gatedAddrs{Applier: addrs.New(&fakeaddrs.Kernel{}, "lbd0")}
		first := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := start(t, dataplane.Options{IPVS: ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{}), Addrs: ga, Sync: first.Sync})
		ga.gate = make(chan struct{})
		setConfig(dp, first)
		synctest.Wait() // the first sync waits in the address applier
		if _, running := dp.SyncingSince(); !running {
			t.Fatal("no sync running")
		}
		rs1 := netip.MustParseAddrPort("10.0.0.1:80")
		key := dp.View().Desired.Services[0].Key
		if w, ok := dp.View().Kernel[key][rs1]; !ok || w != 3 {
			t.Errorf("kernel view while the addresses are written: %v; want 10.0.0.1:80 at weight 3", dp.View().Kernel)
		}
		close(ga.gate)
		synctest.Wait()
	})
}
