package vrrp_test

import (
	"context"
	"net/netip"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/ha/vrrp"
)

// TestKeepalivedPreemptsLbd: an lbd master (priority 100) meets a
// keepalived of priority 200 that preempts it. lbd leaves master at once
// in VRRP terms, keeps its addresses until keepalived has advertised
// twice, then gives them up and sends priority 0 (the release of a heal or
// a preemption). keepalived, as master, answers that with an advert and
// stays master with its addresses: nothing refused, no other transition.
func TestKeepalivedPreemptsLbd(t *testing.T) {
	needKeepalived(t)
	v4 := []netip.Addr{vip4a, vip4b}
	for _, c := range []struct {
		name   string
		conf   kaConf
		params vrrp.Params
	}{
		{"v2 keepalived's defaults", kaConf{version: 2, interval: "1", pass: "secret", vips: v4},
			vrrp.Params{Version: 2, Interval: time.Second, AuthPass: "secret"}},
		{"v3", kaConf{version: 3, interval: "0.1", vips: v4}, vrrp.Params{Version: 3, Interval: 100 * time.Millisecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLink(t)
			s := listenIn(t, l.nsA, ifA, 4)
			p := c.params
			p.VRID, p.Priority, p.Addrs, p.Self = vrid, 100, v4, addrA4
			events, stop := runLbd(t, s, p)
			events.wait(t, "lbd master alone", func(e vrrp.Event) bool { return e.To == vrrp.Master })

			c.conf.priority = 200
			k := startKeepalived(t, l.nsB, c.conf)
			at := k.waitLog(0, `\(VI_1\) Entering MASTER STATE`)
			stepped := events.wait(t, "lbd to give its addresses up", func(e vrrp.Event) bool { return e.From == vrrp.Master })
			if stepped.To != vrrp.Backup || stepped.Cause != vrrp.CauseHigherPeer {
				t.Errorf("lbd's event %+v, want MASTER -> BACKUP for a higher peer", stepped)
			}
			at = k.waitLog(at, `\(VI_1\) Master received priority 0 message`)
			// keepalived stays master: a few of its adverts later, still
			// no transition, its addresses held, nothing refused.
			time.Sleep(max(3*p.Interval, time.Second))
			text := k.text()
			if rx := regexp.MustCompile(`\(VI_1\) Entering (BACKUP|FAULT) STATE`); rx.MatchString(text[at:]) {
				t.Errorf("keepalived left master after lbd's priority 0:\n%s", text[at:])
			}
			if line := complaint.FindString(text); line != "" {
				t.Errorf("keepalived logged %q", line)
			}
			if !hasVIP(t, l.nsB, vip4a) {
				t.Errorf("keepalived does not hold %v", vip4a)
			}
			// Before keepalived stops: lbd would take over and, stopping
			// as master, wait for a peer that is gone.
			stop()
		})
	}
}

// lbdEvents are a Runner's events, in order.
type lbdEvents struct {
	mu   sync.Mutex
	list []vrrp.Event
}

// wait polls for an event that ok accepts, and returns it.
func (l *lbdEvents) wait(t *testing.T, what string, ok func(vrrp.Event) bool) vrrp.Event {
	t.Helper()
	var found vrrp.Event
	eventually(t, what, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, e := range l.list {
			if ok(e) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// runLbd runs one instance of p on s until stop is called or the test
// ends.
func runLbd(t *testing.T, s *vrrp.Socket, p vrrp.Params) (_ *lbdEvents, stop func()) {
	t.Helper()
	events := &lbdEvents{}
	r, err := vrrp.New(vrrp.Options{
		Groups: []vrrp.GroupSpec{{Instances: []vrrp.InstanceSpec{{Name: "VI_1", Link: vrrp.Link{Interface: ifA, Family: 4}, Params: p}}}},
		Dial:   func(vrrp.Link) (vrrp.Conn, error) { return s, nil },
		OnEvent: func(e vrrp.Event) {
			events.mu.Lock()
			events.list = append(events.list, e)
			events.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return events, stop
}
