package daemon

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/connsync"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/lvs"
)

func TestSyncServices(t *testing.T) {
	web := lvs.Key{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Protocol: lvs.TCP}
	sticky := lvs.Key{Addr: netip.MustParseAddr("198.18.100.2"), Port: 443, Protocol: lvs.TCP}
	dr := &config.RealServer{Forward: lvs.Forward{Method: lvs.DR}}
	st := desired.State{Services: []desired.Service{
		{Key: web, Dests: []desired.Dest{{Real: &config.RealServer{}}}},
		{Key: sticky, Flags: desired.FlagPersistent, Timeout: 300, Dests: []desired.Dest{{Real: dr}}},
	}}
	got := syncServices(st)
	for _, tt := range []struct {
		key  lvs.Key
		want connsync.Service
	}{
		{web, connsync.Service{Forward: lvs.NAT}},
		{sticky, connsync.Service{Forward: lvs.DR, Persistence: 300 * time.Second}},
	} {
		if got[tt.key] != tt.want {
			t.Errorf("%v: %+v, want %+v", tt.key, got[tt.key], tt.want)
		}
	}
}

// Only a master giving way asks for a send, and asking never blocks.
func TestConnSyncEvents(t *testing.T) {
	for _, tt := range []struct {
		from, to vrrp.State
		send     bool
	}{
		{vrrp.Master, vrrp.Backup, true},
		{vrrp.Master, vrrp.Fault, true},
		{vrrp.Backup, vrrp.Master, false},
		{vrrp.Master, vrrp.Init, false}, // a stop: sent by planned
		{vrrp.Init, vrrp.Backup, false},
	} {
		c := newConnSync(nil)
		c.event(vrrp.Event{Transition: vrrp.Transition{From: tt.from, To: tt.to}})
		c.event(vrrp.Event{Transition: vrrp.Transition{From: tt.from, To: tt.to}}) // pending: dropped
		if got := len(c.wake) == 1; got != tt.send {
			t.Errorf("%v -> %v: send asked %v, want %v", tt.from, tt.to, got, tt.send)
		}
	}
}

// Stepping down make-before-break asks for a send at once, and the
// release asks again (for connections opened while the addresses were
// still held).
func TestConnSyncHolding(t *testing.T) {
	c := newConnSync(nil)
	c.holding(vrrp.Event{Transition: vrrp.Transition{From: vrrp.Master, To: vrrp.Backup, Cause: vrrp.CauseHigherPeer}})
	if len(c.wake) != 1 {
		t.Fatalf("holding asked for %d sends, want 1", len(c.wake))
	}
	if why := <-c.wake; !strings.Contains(why, "still held") {
		t.Errorf("why %q, want it to say the addresses are still held", why)
	}
	c.event(vrrp.Event{Transition: vrrp.Transition{From: vrrp.Master, To: vrrp.Backup, Cause: vrrp.CauseHigherPeer}})
	if len(c.wake) != 1 {
		t.Errorf("the release asked for %d sends, want 1", len(c.wake))
	}
}
