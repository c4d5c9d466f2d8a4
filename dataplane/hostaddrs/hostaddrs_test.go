package hostaddrs

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/lbdproject/lbd/dataplane/genl"
)

func TestListRetriesInterruptedDumps(t *testing.T) {
	addr := func(s string, link int) netlink.Addr {
		return netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(s)}, LinkIndex: link}
	}
	full := []netlink.Addr{addr("198.51.100.7", 2), addr("192.0.2.10", 9), addr("2001:db8::7", 2), addr("198.51.100.7", 3)}
	partial := full[:1]
	tests := []struct {
		name       string
		interrupts int
		wantCalls  int
		want       []string
		wantErr    bool
	}{
		{"not interrupted", 0, 1, []string{"198.51.100.7", "2001:db8::7"}, false},
		{"interrupted twice: the partial lists are thrown away", 2, 3, []string{"198.51.100.7", "2001:db8::7"}, false},
		{"interrupted every time", genl.DumpAttempts, genl.DumpAttempts, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			got, err := listWith(9, func() ([]netlink.Addr, error) {
				calls++
				if calls <= tt.interrupts {
					// vishvananda/netlink returns what it read, with the error.
					return partial, netlink.ErrDumpInterrupted
				}
				return full, nil
			})
			if calls != tt.wantCalls {
				t.Errorf("%d dumps, want %d", calls, tt.wantCalls)
			}
			if tt.wantErr {
				if !errors.Is(err, netlink.ErrDumpInterrupted) || got != nil {
					t.Errorf("%v, %v; want no addresses and an interrupted dump", got, err)
				}
				return
			}
			var want []netip.Addr
			for _, s := range tt.want {
				want = append(want, netip.MustParseAddr(s))
			}
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%v, %v; want %v", got, err, want)
			}
		})
	}
}
