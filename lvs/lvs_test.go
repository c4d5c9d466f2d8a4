package lvs

import (
	"net/netip"
	"testing"
)

func TestKey(t *testing.T) {
	k := func(a string, port uint16, p Protocol) Key {
		return Key{Addr: netip.MustParseAddr(a), Port: port, Protocol: p}
	}
	for _, tc := range []struct {
		a, b Key
		want int
	}{
		{k("198.18.0.1", 80, TCP), k("198.18.0.1", 80, TCP), 0},
		{k("198.18.0.1", 80, TCP), k("198.18.0.2", 80, TCP), -1},
		{k("198.18.0.1", 443, TCP), k("198.18.0.1", 80, TCP), 1},
		{k("198.18.0.1", 53, TCP), k("198.18.0.1", 53, UDP), -1},
		{k("2001:2::1", 80, TCP), k("198.18.0.1", 80, TCP), 1},
	} {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if got, want := k("2001:2::1", 53, UDP).String(), "[2001:2::1]:53/udp"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
