package dataplane_test

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/floating"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

// releaseCleaner records the VIPs it is asked to release and what lbd0
// held at that moment; it fails while fail is set.
type releaseCleaner struct {
	ka    *fakeaddrs.Kernel
	mu    sync.Mutex
	fail  bool
	calls []string // "VIPs (lbd0 then)"
}

func (c *releaseCleaner) DeleteUDP([]conntrack.Flow) (uint, error) { return 0, nil }

func (c *releaseCleaner) DeleteReleased(vips []netip.Addr) (uint, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("%v (%s)", vips, strings.TrimSpace(c.ka.String())))
	if c.fail {
		return 0, errors.New("conntrack said no")
	}
	return uint(len(vips)), nil
}

// set makes the next passes fail or not and returns how many calls so far.
func (c *releaseCleaner) set(fail bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = fail
	return len(c.calls)
}

func (c *releaseCleaner) since(n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls[n:])
}

// TestReleaseConntrack: a sync that stops serving a VIP removes its
// conntrack entries once the address is gone (the first sync of a box
// that starts as backup too: an lbd before it may have served it); a
// failed pass is retried, but not for a VIP served again meanwhile.
func TestReleaseConntrack(t *testing.T) {
	backup, master := desired.HoldServices(true), desired.HoldServices(false)
	other := desired.ServeOnly(netip.MustParseAddr("192.0.2.99"))
	const released = "[192.0.2.10] (lbd0:)" // the VIP, with lbd0 empty by then
	steps := []struct {
		name    string
		serving *desired.Serving // nil: no change, the retry's turn
		fail    bool
		want    []string // release calls made in this step
	}{
		{"starts as backup", &backup, false, []string{released}},
		{"becomes master", &master, false, nil},
		{"stays master", &master, false, nil},
		{"backup again, the pass fails", &backup, true, []string{released}},
		{"the retry", nil, false, []string{released}},
		{"master", &master, false, nil},
		{"backup, the pass fails", &backup, true, []string{released}},
		{"master before the retry", &master, false, nil},
		{"the retry: nothing left to release", nil, false, nil},
		{"only another VIP served", &other, false, []string{released}},
	}
	synctest.Test(t, func(t *testing.T) {
		ka := &fakeaddrs.Kernel{}
		ct := &releaseCleaner{ka: ka}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := dataplane.New(dataplane.Options{IPVS: ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{}), Addrs: addrs.New(ka, "lbd0"),
			Conntrack: ct, Sync: cfg.Sync})
		setConfig(dp, cfg)
		for i, s := range steps {
			before := ct.set(s.fail)
			if s.serving != nil {
				dp.SetFailover(*s.serving, nil)
			} else {
				time.Sleep(time.Second) // the first retry's backoff
			}
			if i == 0 {
				go dp.Loop(t.Context())
			}
			synctest.Wait()
			if got := ct.since(before); !slices.Equal(got, s.want) {
				t.Errorf("%s: release calls %q, want %q", s.name, got, s.want)
			}
		}
	})
}

// announceRecorder is an Announcer that records every set, and signals
// each through sets.
type announceRecorder struct {
	mu   sync.Mutex
	last map[string][]netip.Addr
	sets chan map[string][]netip.Addr
}

func (a *announceRecorder) Standby(map[string][]netip.Addr) {}

func (a *announceRecorder) Set(vips map[string][]netip.Addr) {
	a.mu.Lock()
	a.last = maps.Clone(vips)
	a.mu.Unlock()
	select {
	case a.sets <- maps.Clone(vips):
	default:
	}
}

// waitingIPVS is an IPVS applier that, while armed, waits in Apply (up to
// a minute of the bubble's time) for the announcer to be handed a set
// with inside in it, and records whether it was, before it returns.
type waitingIPVS struct {
	dataplane.IPVSApplier
	ann    *announceRecorder
	inside netip.Addr
	armed  bool
	seen   []bool
}

func (w *waitingIPVS) Apply(want []desired.Service, full bool) (ipvs.Result, error) {
	if w.armed {
		w.armed = false
		timeout := time.After(time.Minute)
		announced := false
	wait:
		for !announced {
			select {
			case s := <-w.ann.sets:
				announced = slices.Contains(s["eth1"], w.inside)
			case <-timeout:
				break wait
			}
		}
		w.seen = append(w.seen, announced)
	}
	return w.IPVSApplier.Apply(want, full)
}

// TestAnnounceOrder: a box taking over (its virtual servers already in
// IPVS) announces its addresses as soon as they are bound, before the
// other subsystems are done; a sync that creates the virtual servers (the
// first) announces only after IPVS has them.
func TestAnnounceOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inside := netip.MustParsePrefix("198.18.3.1/24")
		backup := []desired.Floating{{Prefix: inside, Link: "eth1", Held: true}}
		master := []desired.Floating{{Prefix: inside, Link: "eth1"}}
		ann := &announceRecorder{sets: make(chan map[string][]netip.Addr, 1)}
		kv := &fakeipvs.Kernel{}
		w := &waitingIPVS{IPVSApplier: ipvs.New(kv, &fakeipvs.Ledger{}), ann: ann, inside: inside.Addr()}
		cfg := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := dataplane.New(dataplane.Options{IPVS: w, Addrs: addrs.New(&fakeaddrs.Kernel{}, "lbd0"),
			Floating: floating.New(&floatKernel{addrs: map[string][]netip.Prefix{}}), Announce: ann, Sync: cfg.Sync})
		// The first sync binds the inside address and creates the
		// virtual server: its announcement must wait for IPVS.
		dp.SetFailover(desired.HoldServices(false), master)
		setConfig(dp, cfg)
		w.armed = true
		go dp.Loop(t.Context())
		time.Sleep(2 * time.Minute) // past the armed wait
		synctest.Wait()
		dp.SetFailover(desired.HoldServices(true), backup)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		// The takeover: announced while IPVS is still being applied.
		select {
		case <-ann.sets: // an earlier sync's
		default:
		}
		w.armed = true
		dp.SetFailover(desired.HoldServices(false), master)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if want := []bool{false, true}; !slices.Equal(w.seen, want) {
			t.Errorf("announced while IPVS was applied: %v, want %v (first sync, takeover)", w.seen, want)
		}
		ann.mu.Lock()
		defer ann.mu.Unlock()
		if !slices.Contains(ann.last["eth1"], inside.Addr()) {
			t.Errorf("last announced %v, want the inside address", ann.last)
		}
	})
}
