package lvs

import (
	"net/netip"
	"testing"
	"unsafe"
)

func key(a string, port uint16, p Protocol) Key {
	return Key{Addr: netip.MustParseAddr(a), Port: port, Protocol: p}
}

func TestKeyCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b Key
		want int
	}{
		{key("198.18.0.1", 80, TCP), key("198.18.0.1", 80, TCP), 0},
		{key("198.18.0.1", 80, TCP), key("198.18.0.2", 80, TCP), -1},
		{key("198.18.0.1", 443, TCP), key("198.18.0.1", 80, TCP), 1},
		{key("198.18.0.1", 53, TCP), key("198.18.0.1", 53, UDP), -1},
		{key("2001:2::1", 80, TCP), key("198.18.0.1", 80, TCP), 1},
		// Firewall-mark virtual servers come after the address ones.
		{FWMarkKey(1, IPv4), key("2001:2::1", 80, TCP), 1},
		{FWMarkKey(1, IPv6), FWMarkKey(2, IPv4), -1},
		{FWMarkKey(1, IPv4), FWMarkKey(1, IPv6), -1},
		{FWMarkKey(7, IPv6), FWMarkKey(7, IPv6), 0},
	} {
		if got := tc.a.Compare(tc.b); got != tc.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestKeyStringParse(t *testing.T) {
	for _, tc := range []struct {
		key  Key
		text string
	}{
		{key("198.18.0.1", 80, TCP), "198.18.0.1:80/tcp"},
		{key("2001:2::1", 53, UDP), "[2001:2::1]:53/udp"},
		{FWMarkKey(7, IPv4), "fwmark:7/ipv4"},
		{FWMarkKey(4294967295, IPv6), "fwmark:4294967295/ipv6"},
	} {
		if got := tc.key.String(); got != tc.text {
			t.Errorf("String() = %q, want %q", got, tc.text)
		}
		got, err := ParseKey(tc.text)
		if err != nil || got != tc.key {
			t.Errorf("ParseKey(%q) = %v, %v; want %v", tc.text, got, err, tc.key)
		}
	}
	for _, bad := range []string{"", "198.18.0.1:80", "198.18.0.1:80/sctp", "198.18.0.1/tcp",
		"fwmark:0/ipv4", "fwmark:x/ipv4", "fwmark:4294967296/ipv4", "fwmark:1/inet", "fwmark:1"} {
		if k, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) = %v; want an error", bad, k)
		}
	}
}

func TestKeyFamily(t *testing.T) {
	for _, tc := range []struct {
		key  Key
		want Family
	}{
		{key("198.18.0.1", 80, TCP), IPv4},
		{key("::ffff:198.18.0.1", 80, TCP), IPv4},
		{key("2001:2::1", 80, TCP), IPv6},
		{FWMarkKey(3, IPv6), IPv6},
		{FWMarkKey(3, IPv4), IPv4},
	} {
		if got := tc.key.Family(); got != tc.want {
			t.Errorf("%v.Family() = %v, want %v", tc.key, got, tc.want)
		}
	}
	if !FWMarkKey(3, IPv4).IsFWMark() || key("198.18.0.1", 80, TCP).IsFWMark() {
		t.Error("IsFWMark: want true only for a firewall-mark key")
	}
}

// TestKeySize guards the key's size: maps keyed by it hold every virtual
// server (10,000s).
func TestKeySize(t *testing.T) {
	if got := unsafe.Sizeof(Key{}); got != 48 {
		t.Errorf("lvs.Key is %d bytes; want 48", got)
	}
}

func TestForward(t *testing.T) {
	for _, tc := range []struct {
		f    Forward
		want string
	}{
		{Forward{}, "nat"},
		{Forward{Method: DR}, "dr"},
		{Forward{Method: Tunnel}, "ipip"},
		{Forward{Method: Tunnel, Tunnel: GUE, Port: 6080}, "gue:6080"},
		{Forward{Method: Tunnel, Tunnel: GRE, Checksum: Checksummed}, "gre"},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.f, got, tc.want)
		}
	}
	if got := unsafe.Sizeof(Forward{}); got != 6 {
		t.Errorf("lvs.Forward is %d bytes; want 6", got)
	}
}
