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
		{key("198.18.0.1", 53, SCTP), key("198.18.0.1", 53, TCP), -1},
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
		{key("198.18.0.1", 2905, SCTP), "198.18.0.1:2905/sctp"},
		{key("2001:2::1", 3868, SCTP), "[2001:2::1]:3868/sctp"},
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
	for _, bad := range []string{"", "198.18.0.1:80", "198.18.0.1:80/SCTP", "198.18.0.1:80/dccp", "198.18.0.1/tcp",
		"fwmark:0/ipv4", "fwmark:x/ipv4", "fwmark:4294967296/ipv4", "fwmark:1/inet", "fwmark:1"} {
		if k, err := ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) = %v; want an error", bad, k)
		}
	}
}

func TestProtocolNumbers(t *testing.T) {
	for _, tc := range []struct {
		p   Protocol
		num uint8
	}{{TCP, 6}, {UDP, 17}, {SCTP, 132}} {
		if got := tc.p.Number(); got != tc.num {
			t.Errorf("%s.Number() = %d, want %d", tc.p, got, tc.num)
		}
		if got, ok := ProtocolOf(tc.num); !ok || got != tc.p {
			t.Errorf("ProtocolOf(%d) = %q, %v; want %q", tc.num, got, ok, tc.p)
		}
		if got, ok := ParseProtocol(string(tc.p)); !ok || got != tc.p {
			t.Errorf("ParseProtocol(%q) = %q, %v", tc.p, got, ok)
		}
	}
	for _, n := range []uint8{0, 1, 33, 136, 255} { // ICMP, DCCP, UDP-Lite: not lbd's
		if p, ok := ProtocolOf(n); ok {
			t.Errorf("ProtocolOf(%d) = %q; want none", n, p)
		}
	}
	for _, s := range []string{"", "TCP", "dccp", "udplite"} {
		if p, ok := ParseProtocol(s); ok {
			t.Errorf("ParseProtocol(%q) = %q; want none", s, p)
		}
	}
	if got := Protocol("dccp").Number(); got != 0 {
		t.Errorf("dccp.Number() = %d, want 0", got)
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
