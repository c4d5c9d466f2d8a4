// Package vrrp speaks the Virtual Router Redundancy Protocol, versions 2
// (RFC 3768, as keepalived speaks it, with its plain-text password) and 3
// (RFC 5798, IPv4 and IPv6), so that a pair of lbd boxes, or an lbd box and
// an unchanged keepalived box, elect which one holds a group of addresses.
package vrrp

import (
	"net/netip"
	"time"
)

// Protocol is VRRP's IP protocol number.
const Protocol = 112

// Multicast groups of VRRP advertisements.
var (
	Group4 = netip.MustParseAddr("224.0.0.18")
	Group6 = netip.MustParseAddr("ff02::12")
)

// AuthType is a VRRPv2 authentication type (RFC 2338 kept them; RFC 3768
// deprecated them; keepalived still sends PASS when configured).
type AuthType uint8

const (
	AuthNone AuthType = 0
	AuthPass AuthType = 1 // a password of up to 8 bytes, in clear
	AuthAH   AuthType = 2 // IPsec AH: lbd refuses it
)

// Advert is one VRRP advertisement.
type Advert struct {
	Version  int // 2 or 3
	VRID     uint8
	Priority uint8 // 0: the master stops; 255: the address owner
	// Interval is the advertisement interval: whole seconds (1..255) in
	// version 2, centiseconds (1..4095) in version 3.
	Interval time.Duration
	// Addrs are the virtual addresses, all of one family (version 2:
	// IPv4 only).
	Addrs    []netip.Addr
	AuthType AuthType // version 2 only
	AuthData [8]byte  // version 2 with AuthPass: the password, NUL padded
}
