package vrrp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Reason is why an advertisement was refused, on receipt (ParseAdvert,
// Conn.Read) or when marshaling one. It is an error itself, so that
// errors.Is(err, ErrBadChecksum) works, and a small number, so that a
// caller can count refusals per reason (ReasonOf, String).
type Reason uint8

// The reasons. Zero is no reason: ReasonOf of an error that is not a
// refusal.
const (
	ErrBadLength   Reason = iota + 1 // too short, longer than the count says, or over the MTU
	ErrBadVersion                    // not 2 or 3, or version 2 over IPv6
	ErrBadType                       // not an advertisement (type 1)
	ErrBadVRID                       // virtual router ID 0
	ErrBadChecksum                   // checksum does not verify
	ErrBadInterval                   // zero, out of range or not whole units
	ErrBadFamily                     // addresses of the wrong or mixed families
	ErrBadAuthType                   // a version 2 auth type lbd cannot use, or any in version 3
	ErrBadTTL                        // TTL or hop limit not 255: not sent from the link
)

var reasonNames = [...]string{
	ErrBadLength:   "bad_length",
	ErrBadVersion:  "bad_version",
	ErrBadType:     "bad_type",
	ErrBadVRID:     "bad_vrid",
	ErrBadChecksum: "bad_checksum",
	ErrBadInterval: "bad_interval",
	ErrBadFamily:   "bad_family",
	ErrBadAuthType: "bad_auth_type",
	ErrBadTTL:      "bad_ttl",
}

// String is a short name fit for a metric label, e.g. "bad_checksum".
func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason_%d", uint8(r))
}

func (r Reason) Error() string { return "VRRP advert refused: " + r.String() }

// AdvertError is a refused advertisement: a Reason and what exactly was
// wrong with it.
type AdvertError struct {
	Reason Reason
	Detail string
}

func (e *AdvertError) Error() string { return e.Reason.Error() + ": " + e.Detail }

// Unwrap returns the Reason, for errors.Is.
func (e *AdvertError) Unwrap() error { return e.Reason }

// ReasonOf returns the reason err (or an error it wraps) refused an
// advertisement, or 0 when err is nil or not a refusal.
func ReasonOf(err error) Reason {
	var r Reason
	if errors.As(err, &r) {
		return r
	}
	return 0
}

func refuse(r Reason, format string, args ...any) error {
	return &AdvertError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

const (
	headerLen  = 8 // version/type, VRID, priority, count, auth type/interval, checksum
	authLen    = 8 // version 2 only: always there, zero without a password
	typeAdvert = 1
	maxCount   = 255 // the count field is one byte
	// A message must fit an MTU of 1500 without fragmenting: 1480 bytes
	// after an IPv4 header (always, since 255 IPv4 addresses take 1036),
	// 1460 after an IPv6 one (at most 90 addresses).
	maxMessage4 = 1500 - 20
	maxMessage6 = 1500 - 40

	centisecond = 10 * time.Millisecond
	maxCentisec = 1<<12 - 1 // 12 bits: 40.95 s
)

// Marshal returns the VRRP message (without the IP header) that carries a
// from src to dst, checksum filled in. Version 2 is IPv4 only, its
// checksum covers the VRRP message alone, and its 8 bytes of
// authentication data are always there (zero unless AuthType is AuthPass).
// Version 3's checksum also covers an IP pseudo-header (src, dst, zero,
// protocol 112, VRRP length), for IPv4 as for IPv6 (RFC 5798 5.2.8), with
// the real destination even when it is unicast: that is what keepalived
// (since 1.3.6) sends and checks by default. Its old_unicast_checksum
// option instead puts 224.0.0.18 in the pseudo-header of unicast IPv4
// adverts; lbd does not do that (ParseAdvert names it when it sees it).
func (a *Advert) Marshal(src, dst netip.Addr) ([]byte, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if err := a.checkHeader(); err != nil {
		return nil, fmt.Errorf("marshaling VRRP advert: %w", err)
	}
	if err := a.checkAddrs(src, dst); err != nil {
		return nil, fmt.Errorf("marshaling VRRP advert: %w", err)
	}
	b := make([]byte, messageLen(a.Version, src.Is4(), len(a.Addrs)))
	b[0] = byte(a.Version<<4 | typeAdvert)
	b[1] = a.VRID
	b[2] = a.Priority
	b[3] = byte(len(a.Addrs))
	if a.Version == 2 {
		b[4] = byte(a.AuthType)
		b[5] = byte(a.Interval / time.Second)
		if a.AuthType == AuthPass {
			copy(b[len(b)-authLen:], a.AuthData[:])
		}
	} else {
		binary.BigEndian.PutUint16(b[4:], uint16(a.Interval/centisecond)) // reserved bits zero
	}
	off := headerLen
	for _, addr := range a.Addrs {
		off += copy(b[off:], addr.Unmap().AsSlice())
	}
	binary.BigEndian.PutUint16(b[6:], ^fold(sum(a.Version, src, dst, b)))
	return b, nil
}

// checkHeader checks the fields that do not depend on the addresses.
func (a *Advert) checkHeader() error {
	switch a.Version {
	case 2:
		if a.Interval < time.Second || a.Interval > 255*time.Second || a.Interval%time.Second != 0 {
			return refuse(ErrBadInterval, "version 2 interval %v is not whole seconds in 1s..255s", a.Interval)
		}
		if a.AuthType != AuthNone && a.AuthType != AuthPass {
			return refuse(ErrBadAuthType, "auth type %d: lbd sends none or a password", a.AuthType)
		}
	case 3:
		if a.Interval < centisecond || a.Interval > maxCentisec*centisecond || a.Interval%centisecond != 0 {
			return refuse(ErrBadInterval, "version 3 interval %v is not whole centiseconds in 10ms..40.95s", a.Interval)
		}
		if a.AuthType != AuthNone {
			return refuse(ErrBadAuthType, "version 3 has no authentication (auth type %d)", a.AuthType)
		}
	default:
		return refuse(ErrBadVersion, "version %d, want 2 or 3", a.Version)
	}
	if a.VRID == 0 {
		return refuse(ErrBadVRID, "virtual router ID 0, want 1..255")
	}
	return nil
}

// checkAddrs checks the families of src, dst and the virtual addresses
// (all unmapped), and that they fit the count field and the MTU.
func (a *Advert) checkAddrs(src, dst netip.Addr) error {
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return refuse(ErrBadFamily, "source %v and destination %v are not of one family", src, dst)
	}
	if a.Version == 2 && !src.Is4() {
		return refuse(ErrBadVersion, "version 2 carries IPv4 only, not %v", src)
	}
	for _, addr := range a.Addrs {
		if !addr.IsValid() || addr.Unmap().Is4() != src.Is4() {
			return refuse(ErrBadFamily, "virtual address %v is not of the family of source %v", addr, src)
		}
	}
	if len(a.Addrs) > maxCount {
		return refuse(ErrBadLength, "%d virtual addresses, at most %d fit the count field", len(a.Addrs), maxCount)
	}
	if n := messageLen(a.Version, src.Is4(), len(a.Addrs)); n > maxMessage(src.Is4()) {
		return refuse(ErrBadLength, "%d virtual addresses make %d bytes, over the %d that fit an MTU of 1500",
			len(a.Addrs), n, maxMessage(src.Is4()))
	}
	return nil
}

// ParseAdvert parses and checks the VRRP message b (without its IP
// header) that came from src to dst; the family of src says whether the
// virtual addresses are IPv4 or IPv6. The length must match the count
// exactly (keepalived refuses a single byte more, too), the checksum must
// verify as Marshal computes it, and the interval must not be zero.
// Refusals are *AdvertError with a Reason. Version 3's reserved bits are
// ignored (RFC 5798), as is the authentication data of a version 2 advert
// without a password. The work is bounded by len(b), and refused early
// when b is over the MTU.
func ParseAdvert(b []byte, src, dst netip.Addr) (Advert, error) {
	src, dst = src.Unmap(), dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return Advert{}, refuse(ErrBadFamily, "source %v and destination %v are not of one family", src, dst)
	}
	if err := checkFrame(b, src.Is4()); err != nil {
		return Advert{}, err
	}
	version := int(b[0] >> 4)
	if fold(sum(version, src, dst, b)) != 0xffff {
		return Advert{}, checksumError(b, src, dst)
	}
	a := Advert{Version: version, VRID: b[1], Priority: b[2]}
	if a.VRID == 0 {
		return Advert{}, refuse(ErrBadVRID, "virtual router ID 0")
	}
	if version == 2 {
		a.Interval = time.Duration(b[5]) * time.Second
		a.AuthType = AuthType(b[4])
		switch a.AuthType {
		case AuthNone:
		case AuthPass:
			copy(a.AuthData[:], b[len(b)-authLen:])
		default: // AH is carried in IP protocol 51, never in an advert like this
			return Advert{}, refuse(ErrBadAuthType, "version 2 auth type %d", a.AuthType)
		}
	} else {
		a.Interval = time.Duration(binary.BigEndian.Uint16(b[4:])&maxCentisec) * centisecond
	}
	if a.Interval == 0 {
		return Advert{}, refuse(ErrBadInterval, "advertisement interval 0")
	}
	alen := addrLen(src.Is4())
	a.Addrs = make([]netip.Addr, b[3])
	for i := range a.Addrs {
		a.Addrs[i], _ = netip.AddrFromSlice(b[headerLen+i*alen : headerLen+(i+1)*alen])
		if a.Addrs[i].Is4In6() {
			// An IPv4 address in IPv6 clothing is no IPv6 virtual address
			// (and would compare unequal to the IPv4 one): found by fuzzing.
			return Advert{}, refuse(ErrBadFamily, "virtual address %v is IPv4-mapped in an IPv6 advert", a.Addrs[i])
		}
	}
	return a, nil
}

// checkFrame checks what comes before the checksum: the version, the type
// and the length.
func checkFrame(b []byte, is4 bool) error {
	if len(b) > maxMessage(is4) {
		return refuse(ErrBadLength, "%d bytes, over the %d that fit an MTU of 1500", len(b), maxMessage(is4))
	}
	if len(b) < headerLen {
		return refuse(ErrBadLength, "%d bytes, shorter than the %d-byte header", len(b), headerLen)
	}
	version := int(b[0] >> 4)
	switch {
	case version != 2 && version != 3:
		return refuse(ErrBadVersion, "version %d", version)
	case version == 2 && !is4:
		return refuse(ErrBadVersion, "version 2 over IPv6")
	case b[0]&0x0f != typeAdvert:
		return refuse(ErrBadType, "type %d, want %d (advertisement)", b[0]&0x0f, typeAdvert)
	}
	if want := messageLen(version, is4, int(b[3])); len(b) != want {
		return refuse(ErrBadLength, "%d bytes, but %d addresses make %d", len(b), b[3], want)
	}
	return nil
}

// checksumError names the checksum keepalived's old_unicast_checksum
// option computes, which differs from the RFC's for unicast IPv4 only.
func checksumError(b []byte, src, dst netip.Addr) error {
	if b[0]>>4 == 3 && dst.Is4() && !dst.IsMulticast() && fold(sum(3, src, Group4, b)) == 0xffff {
		return refuse(ErrBadChecksum, "computed against %v instead of %v, as keepalived's old_unicast_checksum does", Group4, dst)
	}
	return refuse(ErrBadChecksum, "checksum %#04x does not verify", binary.BigEndian.Uint16(b[6:]))
}

// Password returns a version 2 advert's plain-text password (AuthPass),
// up to its first NUL, or "" for any other auth type.
func (a Advert) Password() string {
	if a.AuthType != AuthPass {
		return ""
	}
	for i, c := range a.AuthData {
		if c == 0 {
			return string(a.AuthData[:i])
		}
	}
	return string(a.AuthData[:])
}

// SetPassword sets AuthType to AuthPass and AuthData to the first 8 bytes
// of pw, NUL padded: keepalived too keeps 8 (and warns about the rest).
func (a *Advert) SetPassword(pw string) {
	a.AuthType = AuthPass
	a.AuthData = [8]byte{}
	copy(a.AuthData[:], pw)
}

func addrLen(is4 bool) int {
	if is4 {
		return 4
	}
	return 16
}

func maxMessage(is4 bool) int {
	if is4 {
		return maxMessage4
	}
	return maxMessage6
}

// messageLen is the length of a VRRP message with count addresses.
func messageLen(version int, is4 bool, count int) int {
	n := headerLen + count*addrLen(is4)
	if version == 2 {
		n += authLen
	}
	return n
}

// sum is the ones' complement sum, unfolded, of b and, for version 3, of
// the pseudo-header. The pseudo-header's IPv4 and IPv6 layouts differ
// (the length is 16 or 32 bits, the zero bytes before or after it) but sum
// to the same: addresses, protocol, length.
func sum(version int, src, dst netip.Addr, b []byte) uint64 {
	var acc uint64
	if version == 3 {
		acc = words(src.Unmap().AsSlice()) + words(dst.Unmap().AsSlice()) + Protocol + uint64(len(b))
	}
	return acc + words(b)
}

// words adds up b as big-endian 16-bit words, an odd last byte padded.
func words(b []byte) uint64 {
	var acc uint64
	for len(b) >= 2 {
		acc += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return acc
}

func fold(acc uint64) uint16 {
	for acc>>16 != 0 {
		acc = acc&0xffff + acc>>16
	}
	return uint16(acc)
}
