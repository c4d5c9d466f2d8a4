package vrrp_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/ha/vrrp"
)

var (
	kaSrc4 = netip.MustParseAddr("198.18.0.2")
	kaPeer = netip.MustParseAddr("198.18.0.1")
	kaSrc6 = netip.MustParseAddr("fe80::6ca4:83ff:feaf:5ae4")
	kaVIPs = []netip.Addr{netip.MustParseAddr("198.18.0.100"), netip.MustParseAddr("198.18.0.101")}
	kaVIP6 = []netip.Addr{netip.MustParseAddr("2001:2::100")}
)

func secret() [8]byte { return [8]byte{'s', 'e', 'c', 'r', 'e', 't'} }

// keepalivedVectors are adverts keepalived 2.2.7 sent (captured from the
// wire, VRID 51, priority 100); Marshal must produce the same bytes.
var keepalivedVectors = []struct {
	name     string
	hex      string
	src, dst netip.Addr
	advert   vrrp.Advert
}{
	{"v2 PASS", "213364020101b08ec6120064c61200657365637265740000", kaSrc4, vrrp.Group4,
		vrrp.Advert{Version: 2, VRID: 51, Priority: 100, Interval: time.Second, Addrs: kaVIPs, AuthType: vrrp.AuthPass, AuthData: secret()}},
	{"v3 IPv4 multicast", "31336402000a372ac6120064c6120065", kaSrc4, vrrp.Group4,
		vrrp.Advert{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: kaVIPs}},
	// The same advert unicast: another checksum, since the pseudo-header
	// holds the real destination.
	{"v3 IPv4 unicast", "31336402000a5129c6120064c6120065", kaSrc4, kaPeer,
		vrrp.Advert{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: kaVIPs}},
	{"v3 IPv6", "31336401000a016820010002000000000000000000000100", kaSrc6, vrrp.Group6,
		vrrp.Advert{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: kaVIP6}},
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func equalAdvert(a, b vrrp.Advert) bool {
	return a.Version == b.Version && a.VRID == b.VRID && a.Priority == b.Priority && a.Interval == b.Interval &&
		slices.Equal(a.Addrs, b.Addrs) && a.AuthType == b.AuthType && a.AuthData == b.AuthData
}

func TestKeepalivedVectors(t *testing.T) {
	for _, v := range keepalivedVectors {
		t.Run(v.name, func(t *testing.T) {
			wire := unhex(t, v.hex)
			a, err := vrrp.ParseAdvert(wire, v.src, v.dst)
			if err != nil || !equalAdvert(a, v.advert) {
				t.Errorf("ParseAdvert = %+v, %v; want %+v", a, err, v.advert)
			}
			b, err := v.advert.Marshal(v.src, v.dst)
			if err != nil || !bytes.Equal(b, wire) {
				t.Errorf("Marshal = %x, %v; want %s", b, err, v.hex)
			}
		})
	}
}

// TestOldUnicastChecksum: keepalived's old_unicast_checksum computes the
// unicast checksum against 224.0.0.18, which is the multicast advert's
// checksum sent to a unicast address; it is refused, and named.
func TestOldUnicastChecksum(t *testing.T) {
	_, err := vrrp.ParseAdvert(unhex(t, keepalivedVectors[1].hex), kaSrc4, kaPeer)
	if !errors.Is(err, vrrp.ErrBadChecksum) || !strings.Contains(err.Error(), "old_unicast_checksum") {
		t.Errorf("ParseAdvert = %v, want a bad checksum naming old_unicast_checksum", err)
	}
	_, err = vrrp.ParseAdvert(unhex(t, keepalivedVectors[2].hex), kaSrc4, vrrp.Group4)
	if !errors.Is(err, vrrp.ErrBadChecksum) || strings.Contains(err.Error(), "old_unicast_checksum") {
		t.Errorf("ParseAdvert = %v, want a plain bad checksum", err)
	}
}

// reChecksum makes b's checksum verify again after a change. It searches
// the 16-bit field by brute force: cheap, and independent of the checksum
// arithmetic under test.
func reChecksum(t *testing.T, b []byte, src, dst netip.Addr) []byte {
	t.Helper()
	for c := 0; c <= 0xffff; c++ {
		b[6], b[7] = byte(c>>8), byte(c)
		if _, err := vrrp.ParseAdvert(b, src, dst); !errors.Is(err, vrrp.ErrBadChecksum) {
			return b
		}
	}
	t.Fatalf("no checksum makes %x verify", b)
	return nil
}

func TestParseRefusals(t *testing.T) {
	v2 := keepalivedVectors[0]
	v3 := keepalivedVectors[1]
	v6 := keepalivedVectors[3]
	for _, c := range []struct {
		name     string
		base     string
		src, dst netip.Addr
		change   func([]byte) []byte
		fix      bool // recompute the checksum after the change
		want     vrrp.Reason
	}{
		{"empty", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return nil }, false, vrrp.ErrBadLength},
		{"header cut", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return b[:7] }, false, vrrp.ErrBadLength},
		{"address cut", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return b[:len(b)-1] }, false, vrrp.ErrBadLength},
		{"a byte more", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return append(b, 0) }, false, vrrp.ErrBadLength},
		{"count too high", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[3] = 3; return b }, false, vrrp.ErrBadLength},
		{"v2 auth data cut", v2.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return b[:len(b)-8] }, false, vrrp.ErrBadLength},
		{"over the MTU", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { return make([]byte, 1481) }, false, vrrp.ErrBadLength},
		{"version 1", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[0] = 0x11; return b }, true, vrrp.ErrBadVersion},
		{"version 4", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[0] = 0x41; return b }, true, vrrp.ErrBadVersion},
		{"v2 over IPv6", v6.hex, kaSrc6, vrrp.Group6, func(b []byte) []byte { b[0] = 0x21; return b }, false, vrrp.ErrBadVersion},
		{"type 2", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[0] = 0x32; return b }, true, vrrp.ErrBadType},
		{"VRID 0", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[1] = 0; return b }, true, vrrp.ErrBadVRID},
		{"checksum", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[6] ^= 0x80; return b }, false, vrrp.ErrBadChecksum},
		{"v3 another source", v3.hex, kaPeer, vrrp.Group4, func(b []byte) []byte { return b }, false, vrrp.ErrBadChecksum},
		{"v6 another source", v6.hex, netip.MustParseAddr("fe80::1"), vrrp.Group6, func(b []byte) []byte { return b }, false, vrrp.ErrBadChecksum},
		{"v2 payload", v2.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[len(b)-1] = 1; return b }, false, vrrp.ErrBadChecksum},
		{"v2 interval 0", v2.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[5] = 0; return b }, true, vrrp.ErrBadInterval},
		{"v3 interval 0", v3.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[4], b[5] = 0xf0, 0; return b }, true, vrrp.ErrBadInterval},
		{"v2 AH", v2.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[4] = 2; return b }, true, vrrp.ErrBadAuthType},
		{"v2 auth type 3", v2.hex, kaSrc4, vrrp.Group4, func(b []byte) []byte { b[4] = 3; return b }, true, vrrp.ErrBadAuthType},
		{"no source", v3.hex, netip.Addr{}, vrrp.Group4, func(b []byte) []byte { return b }, false, vrrp.ErrBadFamily},
		{"mixed families", v3.hex, kaSrc4, vrrp.Group6, func(b []byte) []byte { return b }, false, vrrp.ErrBadFamily},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.change(unhex(t, c.base))
			if c.fix {
				b = reChecksum(t, b, c.src, c.dst)
			}
			a, err := vrrp.ParseAdvert(b, c.src, c.dst)
			var ae *vrrp.AdvertError
			if vrrp.ReasonOf(err) != c.want || !errors.Is(err, c.want) || !errors.As(err, &ae) || ae.Detail == "" {
				t.Errorf("ParseAdvert(%x) = %v, want %v", b, err, c.want)
			}
			if a.Version != 0 || a.Addrs != nil {
				t.Errorf("a refused advert came with %+v", a)
			}
		})
	}
}

// TestParseLenient: what RFC 5798 says to ignore is ignored.
func TestParseLenient(t *testing.T) {
	b := unhex(t, keepalivedVectors[1].hex)
	b[4] |= 0xf0 // reserved bits
	b = reChecksum(t, b, kaSrc4, vrrp.Group4)
	if a, err := vrrp.ParseAdvert(b, kaSrc4, vrrp.Group4); err != nil || a.Interval != 100*time.Millisecond {
		t.Errorf("with reserved bits set: %+v, %v", a, err)
	}
	// Version 2 without authentication: the data is ignored.
	b = unhex(t, keepalivedVectors[0].hex)
	b[4] = 0
	b = reChecksum(t, b, kaSrc4, vrrp.Group4)
	if a, err := vrrp.ParseAdvert(b, kaSrc4, vrrp.Group4); err != nil || a.AuthType != vrrp.AuthNone || a.AuthData != [8]byte{} || a.Password() != "" {
		t.Errorf("v2 without auth: %+v, %v", a, err)
	}
	// IPv4-mapped IPv6 addresses are IPv4.
	mapped := netip.AddrFrom16(kaSrc4.As16())
	if _, err := vrrp.ParseAdvert(unhex(t, keepalivedVectors[0].hex), mapped, vrrp.Group4); err != nil {
		t.Errorf("from %v: %v", mapped, err)
	}
}

func addrs(n int, v6 bool) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		if v6 {
			out[i] = netip.AddrFrom16([16]byte{0x20, 0x01, 0, 2, 14: byte(i >> 8), 15: byte(i)})
		} else {
			out[i] = netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)})
		}
	}
	return out
}

func TestMarshal(t *testing.T) {
	v2 := vrrp.Advert{Version: 2, VRID: 1, Priority: 255, Interval: 255 * time.Second, Addrs: addrs(255, false)}
	v3 := vrrp.Advert{Version: 3, VRID: 255, Priority: 0, Interval: 40950 * time.Millisecond, Addrs: addrs(255, false)}
	v6 := vrrp.Advert{Version: 3, VRID: 7, Priority: 1, Interval: 10 * time.Millisecond, Addrs: addrs(90, true)}
	ll := netip.MustParseAddr("fe80::1%eth0")
	with := func(a vrrp.Advert, f func(*vrrp.Advert)) vrrp.Advert {
		a.Addrs = slices.Clone(a.Addrs)
		f(&a)
		return a
	}
	for _, c := range []struct {
		name     string
		advert   vrrp.Advert
		src, dst netip.Addr
		want     vrrp.Reason // 0: marshals, and parses back the same
		length   int
	}{
		{"v2 255 addresses", v2, kaSrc4, vrrp.Group4, 0, 8 + 4*255 + 8},
		{"v2 no address", with(v2, func(a *vrrp.Advert) { a.Addrs = nil }), kaSrc4, vrrp.Group4, 0, 16},
		{"v2 password", with(v2, func(a *vrrp.Advert) { a.SetPassword("12345678") }), kaSrc4, vrrp.Group4, 0, 1036},
		{"v3 255 addresses", v3, kaSrc4, kaPeer, 0, 8 + 4*255},
		{"v3 IPv6 90 addresses", v6, ll, vrrp.Group6, 0, 8 + 16*90},
		{"v3 IPv6 91 addresses", with(v6, func(a *vrrp.Advert) { a.Addrs = addrs(91, true) }), ll, vrrp.Group6, vrrp.ErrBadLength, 0},
		{"v2 256 addresses", with(v2, func(a *vrrp.Advert) { a.Addrs = addrs(256, false) }), kaSrc4, vrrp.Group4, vrrp.ErrBadLength, 0},
		{"version 1", with(v2, func(a *vrrp.Advert) { a.Version = 1 }), kaSrc4, vrrp.Group4, vrrp.ErrBadVersion, 0},
		{"v2 IPv6", with(v6, func(a *vrrp.Advert) { a.Version, a.Interval = 2, time.Second }), ll, vrrp.Group6, vrrp.ErrBadVersion, 0},
		{"VRID 0", with(v3, func(a *vrrp.Advert) { a.VRID = 0 }), kaSrc4, vrrp.Group4, vrrp.ErrBadVRID, 0},
		{"mixed src and dst", v3, kaSrc4, vrrp.Group6, vrrp.ErrBadFamily, 0},
		{"no dst", v3, kaSrc4, netip.Addr{}, vrrp.ErrBadFamily, 0},
		{"an IPv6 VIP in IPv4", with(v3, func(a *vrrp.Advert) { a.Addrs[3] = kaVIP6[0] }), kaSrc4, vrrp.Group4, vrrp.ErrBadFamily, 0},
		{"a zero VIP", with(v3, func(a *vrrp.Advert) { a.Addrs[3] = netip.Addr{} }), kaSrc4, vrrp.Group4, vrrp.ErrBadFamily, 0},
		{"v2 1.5s", with(v2, func(a *vrrp.Advert) { a.Interval = 1500 * time.Millisecond }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v2 0s", with(v2, func(a *vrrp.Advert) { a.Interval = 0 }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v2 256s", with(v2, func(a *vrrp.Advert) { a.Interval = 256 * time.Second }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v3 15ms", with(v3, func(a *vrrp.Advert) { a.Interval = 15 * time.Millisecond }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v3 40.96s", with(v3, func(a *vrrp.Advert) { a.Interval = 40960 * time.Millisecond }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v3 0", with(v3, func(a *vrrp.Advert) { a.Interval = 0 }), kaSrc4, vrrp.Group4, vrrp.ErrBadInterval, 0},
		{"v2 AH", with(v2, func(a *vrrp.Advert) { a.AuthType = vrrp.AuthAH }), kaSrc4, vrrp.Group4, vrrp.ErrBadAuthType, 0},
		{"v3 PASS", with(v3, func(a *vrrp.Advert) { a.SetPassword("x") }), kaSrc4, vrrp.Group4, vrrp.ErrBadAuthType, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.advert.Marshal(c.src, c.dst)
			if vrrp.ReasonOf(err) != c.want || (err != nil) != (c.want != 0) {
				t.Fatalf("Marshal = %v, want reason %v", err, c.want)
			}
			if err != nil {
				if !strings.HasPrefix(err.Error(), "marshaling VRRP advert: ") {
					t.Errorf("error %q lacks context", err)
				}
				return
			}
			if len(b) != c.length {
				t.Errorf("%d bytes, want %d", len(b), c.length)
			}
			back, err := vrrp.ParseAdvert(b, c.src, c.dst)
			if err != nil || !equalAdvert(back, c.advert) {
				t.Errorf("parsed back %+v, %v; want %+v", back, err, c.advert)
			}
		})
	}
}

func TestPassword(t *testing.T) {
	for _, c := range []struct{ set, want string }{
		{"secret", "secret"}, {"12345678", "12345678"}, {"123456789", "12345678"}, {"", ""},
	} {
		var a vrrp.Advert
		a.AuthData[7] = 'x' // overwritten
		a.SetPassword(c.set)
		if got := a.Password(); got != c.want || a.AuthType != vrrp.AuthPass {
			t.Errorf("SetPassword(%q): Password() = %q (auth type %d), want %q", c.set, got, a.AuthType, c.want)
		}
	}
	if a := (vrrp.Advert{AuthData: secret()}); a.Password() != "" {
		t.Errorf("Password() without AuthPass = %q, want none", a.Password())
	}
}

func TestReasons(t *testing.T) {
	seen := map[string]bool{}
	for r := vrrp.ErrBadLength; r <= vrrp.ErrBadTTL; r++ {
		s := r.String()
		if seen[s] || !strings.HasPrefix(s, "bad_") || !strings.Contains(r.Error(), s) {
			t.Errorf("reason %d: %q, %q", r, s, r.Error())
		}
		seen[s] = true
	}
	if vrrp.ReasonOf(nil) != 0 || vrrp.ReasonOf(errors.New("x")) != 0 {
		t.Error("ReasonOf of a non-refusal is not 0")
	}
	if vrrp.Reason(200).String() != "reason_200" {
		t.Errorf("unknown reason: %q", vrrp.Reason(200).String())
	}
}
