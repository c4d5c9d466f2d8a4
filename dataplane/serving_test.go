package dataplane_test

import (
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

// TestServing checks that a box that stops serving a VIP unbinds it and
// keeps its virtual server, and binds it again when it serves it again.
func TestServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv, ka := &fakeipvs.Kernel{}, &fakeaddrs.Kernel{}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Addrs: addrs.New(ka, "lbd0"), Sync: cfg.Sync})
		setConfig(dp, cfg)
		synctest.Wait()
		ipvsBefore := kv.String()
		for _, step := range []struct {
			serving desired.Serving
			addrs   string
		}{
			{desired.ServeOnly(), "lbd0: \n"},
			{desired.ServeOnly(netip.MustParseAddr("192.0.2.10")), "lbd0: 192.0.2.10\n"},
			{desired.ServeOnly(), "lbd0: \n"},
			{desired.Serving{}, "lbd0: 192.0.2.10\n"},
		} {
			dp.SetServing(step.serving)
			time.Sleep(time.Second) // min_sync_period
			synctest.Wait()
			if got := ka.String(); got != step.addrs {
				t.Errorf("serving all=%v: addresses %q, want %q", step.serving.All(), got, step.addrs)
			}
			if got := kv.String(); got != ipvsBefore {
				t.Errorf("serving all=%v: IPVS changed:\n%s\nwant:\n%s", step.serving.All(), got, ipvsBefore)
			}
		}
	})
}
