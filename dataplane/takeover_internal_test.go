package dataplane

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/desired"
)

// TestAddrGate: a takeover only adds to what a sync bound, and whatever
// was computed from older failover inputs than those applied leaves the
// addresses be.
func TestAddrGate(t *testing.T) {
	x, y := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	type step struct {
		takeover bool
		gen      uint64
		vips     []netip.Addr
		// ran: a takeover bound, or a sync was not skipped.
		ran bool
	}
	tests := []struct {
		name  string
		steps []step
		want  []netip.Addr
	}{
		{"a takeover before the first sync does nothing",
			[]step{{true, 1, []netip.Addr{x}, false}}, nil},
		{"a takeover binds ahead of its sync",
			[]step{{false, 1, nil, true}, {true, 2, []netip.Addr{x}, true}}, []netip.Addr{x}},
		{"an older sync after a takeover is skipped",
			[]step{{false, 1, nil, true}, {true, 2, []netip.Addr{x}, true}, {false, 1, nil, false}}, []netip.Addr{x}},
		{"a takeover only adds; its sync removes",
			[]step{{false, 1, []netip.Addr{y}, true}, {true, 2, []netip.Addr{x}, true}}, []netip.Addr{x, y}},
		{"the takeover's own sync applies exactly",
			[]step{{false, 1, []netip.Addr{y}, true}, {true, 2, []netip.Addr{x}, true}, {false, 2, []netip.Addr{x}, true}}, []netip.Addr{x}},
		{"a stale takeover does nothing",
			[]step{{false, 1, nil, true}, {true, 3, []netip.Addr{x}, true}, {true, 2, []netip.Addr{y}, false}}, []netip.Addr{x}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka := &fakeaddrs.Kernel{}
			a := &appliers{addrs: addrs.New(ka, "lbd0")}
			for i, s := range tt.steps {
				st := &desired.State{VIPs: s.vips}
				var ran bool
				if s.takeover {
					_, ran = a.takeover(st, s.gen, nil)
				} else {
					ran = !a.applyAddrsGated(st, s.gen, false, false).skipped
				}
				if ran != s.ran {
					t.Errorf("step %d: ran %v, want %v", i, ran, s.ran)
				}
			}
			dump, _, _ := ka.Dump("lbd0")
			slices.SortFunc(dump, netip.Addr.Compare)
			if !slices.Equal(dump, tt.want) {
				t.Errorf("bound %v, want %v", dump, tt.want)
			}
		})
	}
}
