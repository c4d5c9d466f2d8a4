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
			name    string
			serving desired.Serving
			addrs   string
		}{
			{"none", desired.ServeOnly(), "lbd0: \n"},
			{"its VIP", desired.ServeOnly(netip.MustParseAddr("192.0.2.10")), "lbd0: 192.0.2.10\n"},
			{"none again", desired.ServeOnly(), "lbd0: \n"},
			{"all", desired.Serving{}, "lbd0: 192.0.2.10\n"},
		} {
			dp.SetServing(step.serving)
			time.Sleep(time.Second) // min_sync_period
			synctest.Wait()
			if got := ka.String(); got != step.addrs {
				t.Errorf("serving %s: addresses %q, want %q", step.name, got, step.addrs)
			}
			if got := kv.String(); got != ipvsBefore {
				t.Errorf("serving %s: IPVS changed:\n%s\nwant:\n%s", step.name, got, ipvsBefore)
			}
		}
	})
}
