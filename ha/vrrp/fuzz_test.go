package vrrp

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"slices"
	"testing"
)

// FuzzParseAdvert: ParseAdvert never panics; it refuses with a Reason and
// a zero Advert, or what it accepts marshals back to the same bytes, with
// two exceptions it canonicalizes: version 3's reserved bits and version
// 2's authentication data without a password are ignored on receipt and
// sent as zero, and a checksum of 0xffff (ones' complement -0, which
// verifies like 0) is sent as 0, as Linux and keepalived compute it.
// When fix is set the harness fills in a valid checksum first, or the
// fuzzer would rarely get past it.
func FuzzParseAdvert(f *testing.F) {
	for _, s := range []string{
		"213364020101b08ec6120064c61200657365637265740000", // keepalived 2.2.7, v2 PASS
		"31336402000a372ac6120064c6120065",                 // v3 IPv4 to 224.0.0.18
		"31336402000a5129c6120064c6120065",                 // v3 IPv4 unicast
		"31336401000a016820010002000000000000000000000100", // v3 IPv6
	} {
		b, _ := hex.DecodeString(s)
		for _, v6 := range []bool{false, true} {
			f.Add(b, v6, false, false)
			f.Add(b, v6, true, true)
		}
	}
	f.Add([]byte{}, false, false, true)
	// Over the MTU, so that the fuzzer does not find that branch itself
	// and spend long minimizing a long input (its minimizer is quadratic).
	f.Add(make([]byte, maxMessage4+1), false, false, true)
	f.Add(make([]byte, maxMessage6+1), true, false, true)
	f.Add([]byte{0x31, 1, 1, 0, 0xf0, 1, 0, 0}, false, false, true)
	f.Fuzz(func(t *testing.T, b []byte, v6, unicast, fix bool) {
		src, dst := netip.MustParseAddr("198.18.0.2"), Group4
		if unicast {
			dst = netip.MustParseAddr("198.18.0.1")
		}
		if v6 {
			src, dst = netip.MustParseAddr("fe80::2"), Group6
			if unicast {
				dst = netip.MustParseAddr("2001:2::1")
			}
		}
		if fix && len(b) >= headerLen {
			b = slices.Clone(b) // the fuzzer's own copy must not change
			b[6], b[7] = 0, 0
			binary.BigEndian.PutUint16(b[6:], ^fold(sum(int(b[0]>>4), src, dst, b)))
		}
		a, err := ParseAdvert(b, src, dst)
		if err != nil {
			if ReasonOf(err) == 0 || a.Version != 0 || a.Addrs != nil {
				t.Fatalf("refused with %v (reason %d) and %+v", err, ReasonOf(err), a)
			}
			return
		}
		out, err := a.Marshal(src, dst)
		if err != nil {
			t.Fatalf("%+v parsed from %x does not marshal: %v", a, b, err)
		}
		want := canonical(b, src, dst)
		if !bytes.Equal(out, want) {
			t.Fatalf("%x parsed to %+v, which marshals to %x, want %x", b, a, out, want)
		}
		// Nothing canonicalized but the checksum: it may only be -0.
		if bytes.Equal(b[:6], want[:6]) && bytes.Equal(b[8:], want[8:]) && !bytes.Equal(b[6:8], want[6:8]) &&
			!(b[6] == 0xff && b[7] == 0xff && want[6] == 0 && want[7] == 0) {
			t.Fatalf("%x verified with checksum %x, but Marshal computes %x", b, b[6:8], want[6:8])
		}
		back, err := ParseAdvert(out, src, dst)
		if err != nil || back.Version != a.Version || back.VRID != a.VRID || back.Priority != a.Priority ||
			back.Interval != a.Interval || !slices.Equal(back.Addrs, a.Addrs) || back.AuthType != a.AuthType || back.AuthData != a.AuthData {
			t.Fatalf("%x parsed back to %+v, %v; want %+v", out, back, err, a)
		}
	})
}

// canonical is the valid message b as Marshal would write it.
func canonical(b []byte, src, dst netip.Addr) []byte {
	c := slices.Clone(b)
	if c[0]>>4 == 3 {
		c[4] &= 0x0f
	} else if AuthType(c[4]) == AuthNone {
		clear(c[len(c)-authLen:])
	}
	c[6], c[7] = 0, 0
	binary.BigEndian.PutUint16(c[6:], ^fold(sum(int(c[0]>>4), src, dst, c)))
	return c
}
