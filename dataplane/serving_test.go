package dataplane_test

import (
	"context"
	"fmt"
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

// floatKernel is an in-memory floating.Kernel.
type floatKernel struct{ addrs map[string][]netip.Prefix }

func (k *floatKernel) Addrs(link string) ([]netip.Prefix, error) { return k.addrs[link], nil }
func (k *floatKernel) Add(link string, p netip.Prefix) error {
	k.addrs[link] = append(k.addrs[link], p)
	return nil
}
func (k *floatKernel) Delete(link string, p netip.Prefix) error {
	k.addrs[link] = slices.DeleteFunc(k.addrs[link], func(q netip.Prefix) bool { return q == p })
	return nil
}

// TestFailover: a VRRP transition moves the carried VIPs and the floating
// addresses together; Release, after the loop, gives them up at once.
func TestFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv, ka, kf := &fakeipvs.Kernel{}, &fakeaddrs.Kernel{}, &floatKernel{addrs: map[string][]netip.Prefix{}}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		inside := netip.MustParsePrefix("198.18.3.1/24")
		backup := []desired.Floating{{Prefix: inside, Link: "eth1", Held: true}}
		master := []desired.Floating{{Prefix: inside, Link: "eth1"}}
		dp := dataplane.New(dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Addrs: addrs.New(ka, "lbd0"),
			Floating: floating.New(kf), Sync: cfg.Sync})
		dp.SetFailover(desired.HoldServices(true), backup)
		setConfig(dp, cfg)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { dp.Loop(ctx); close(done) }()
		synctest.Wait()
		if got := ka.String() + fmt.Sprint(kf.addrs); got != "lbd0: \nmap[]" {
			t.Errorf("backup from the first sync: %q, want nothing bound", got)
		}
		dp.SetFailover(desired.HoldServices(false), master)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := ka.String() + fmt.Sprint(kf.addrs); got != "lbd0: 192.0.2.10\nmap[eth1:[198.18.3.1/24]]" {
			t.Errorf("master: %q, want the VIP and the inside address bound", got)
		}
		cancel()
		<-done
		dp.SetFailover(desired.HoldServices(true), backup)
		if err := dp.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := ka.String() + fmt.Sprint(kf.addrs); got != "lbd0: \nmap[eth1:[]]" {
			t.Errorf("after Release: %q, want nothing bound", got)
		}
	})
}
