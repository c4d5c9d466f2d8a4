// Package lvs is the vocabulary every layer of lbd shares about the
// kernel's load balancer: which virtual server (Key), over which transport
// (Protocol), and which real server of which service (HealthKey). The
// configuration, the desired state, the appliers and the health checks all
// speak it, so it sits at the bottom and imports nothing of lbd's.
package lvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Protocol is a virtual service's transport protocol, named as ipset and
// the configuration write it.
type Protocol string

const (
	TCP  Protocol = "tcp"
	UDP  Protocol = "udp"
	SCTP Protocol = "sctp"
)

// Protocols lists the protocols lbd serves, in the order the
// configuration's messages list them.
func Protocols() []Protocol { return []Protocol{TCP, UDP, SCTP} }

// IP protocol numbers (IANA), as IPVS, ipset and sockets take them.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

// Number is p's IP protocol number, 0 for a protocol lbd does not serve.
func (p Protocol) Number() uint8 {
	switch p {
	case TCP:
		return protoTCP
	case UDP:
		return protoUDP
	case SCTP:
		return protoSCTP
	}
	return 0
}

// ProtocolOf returns the protocol of IP protocol number n, and whether
// lbd serves it.
func ProtocolOf(n uint8) (Protocol, bool) {
	switch n {
	case protoTCP:
		return TCP, true
	case protoUDP:
		return UDP, true
	case protoSCTP:
		return SCTP, true
	}
	return "", false
}

// ParseProtocol returns the protocol named s ("tcp", "udp", "sctp"), and
// whether lbd serves it.
func ParseProtocol(s string) (Protocol, bool) {
	for _, p := range Protocols() {
		if string(p) == s {
			return p, true
		}
	}
	return "", false
}

// Key identifies an IPVS virtual server: an address, port and protocol,
// or a firewall mark (FWMark not 0) with the address family it serves.
// The field order keeps it at 48 bytes: it is the key of maps holding
// every virtual server.
type Key struct {
	// Addr is the virtual address; for a firewall-mark key, the
	// unspecified address of its family (0.0.0.0 or ::).
	Addr netip.Addr
	Port uint16 // 0 for a firewall-mark key
	// FWMark, when not 0, makes this a firewall-mark virtual server: it
	// takes every packet the packet filter marked so, whatever its
	// address, port or protocol.
	FWMark   uint32
	Protocol Protocol // empty for a firewall-mark key
}

// FWMarkKey returns the key of the firewall-mark virtual server of mark in
// family (IPv4 or IPv6).
func FWMarkKey(mark uint32, family Family) Key {
	a := netip.IPv4Unspecified()
	if family == IPv6 {
		a = netip.IPv6Unspecified()
	}
	return Key{Addr: a, FWMark: mark}
}

// IsFWMark reports whether k is a firewall-mark virtual server.
func (k Key) IsFWMark() bool { return k.FWMark != 0 }

// Family is k's address family.
func (k Key) Family() Family { return FamilyOf(k.Addr) }

func (k Key) String() string {
	if k.IsFWMark() {
		return fmt.Sprintf("fwmark:%d/%s", k.FWMark, k.Family())
	}
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), k.Protocol)
}

// Compare orders keys: address virtual servers by address, port, then
// protocol; after them firewall-mark ones by mark, then family.
func (k Key) Compare(o Key) int {
	return cmp.Or(cmp.Compare(k.FWMark, o.FWMark), k.Addr.Compare(o.Addr), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Protocol, o.Protocol))
}

// Family is an address family, named by its IP version.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns a's family; an IPv4-mapped IPv6 address is IPv4, as
// the kernel treats it.
func FamilyOf(a netip.Addr) Family {
	if a.Is6() && !a.Is4In6() {
		return IPv6
	}
	return IPv4
}

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// HealthKey identifies one real server of one lbd service: health is
// checked, and reported, per service, since two services may check the
// same address differently.
type HealthKey struct {
	Service string
	Addr    netip.AddrPort
}

// ParseKey parses a key as Key.String writes it: "192.0.2.10:80/tcp",
// "[2001:2::1]:53/udp", "198.18.0.1:2905/sctp" or "fwmark:7/ipv4".
func ParseKey(s string) (Key, error) {
	bad := fmt.Errorf("bad virtual server key %q: want ADDRESS:PORT/tcp|udp|sctp or fwmark:MARK/ipv4|ipv6", s)
	left, right, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, bad
	}
	if mark, found := strings.CutPrefix(left, "fwmark:"); found {
		m, err := strconv.ParseUint(mark, 10, 32)
		if err != nil || m == 0 || (right != IPv4.String() && right != IPv6.String()) {
			return Key{}, bad
		}
		f := IPv4
		if right == IPv6.String() {
			f = IPv6
		}
		return FWMarkKey(uint32(m), f), nil
	}
	a, err := netip.ParseAddrPort(left)
	p, known := ParseProtocol(right)
	if err != nil || !known {
		return Key{}, bad
	}
	return Key{Addr: a.Addr(), Port: a.Port(), Protocol: p}, nil
}

// Method is how IPVS forwards a packet to a real server.
type Method uint8

const (
	// NAT rewrites the destination and needs the replies back through the
	// director (masquerading); lbd's default.
	NAT Method = iota
	// DR (direct routing) sends the packet unchanged to the real server's
	// link-layer address: the real server answers the client itself.
	DR
	// Tunnel encapsulates the packet to the real server (Forward.Tunnel
	// says how); it too answers the client itself.
	Tunnel
)

func (m Method) String() string {
	switch m {
	case NAT:
		return "nat"
	case DR:
		return "dr"
	case Tunnel:
		return "tunnel"
	}
	return fmt.Sprintf("method-%d", uint8(m))
}

// Encap is a tunnel's encapsulation, numbered as the kernel numbers them.
type Encap uint8

const (
	IPIP Encap = iota
	GUE
	GRE
)

func (e Encap) String() string {
	switch e {
	case IPIP:
		return "ipip"
	case GUE:
		return "gue"
	case GRE:
		return "gre"
	}
	return fmt.Sprintf("encap-%d", uint8(e))
}

// Checksum is a GUE or GRE tunnel's checksum mode, as the kernel's
// tunnel flags have them.
type Checksum uint8

const (
	NoChecksum     Checksum = 0
	Checksummed    Checksum = 1 // IP_VS_TUNNEL_ENCAP_FLAG_CSUM
	RemoteChecksum Checksum = 2 // IP_VS_TUNNEL_ENCAP_FLAG_REMCSUM
)

// Forward is how IPVS reaches a destination: the method and, for
// tunnels, the encapsulation. The zero value is NAT. It is 6 bytes: the
// desired state and the IPVS applier's cache hold one per destination.
type Forward struct {
	Method   Method
	Tunnel   Encap    // Tunnel only
	Checksum Checksum // GUE and GRE only
	Port     uint16   // GUE's destination port
}

func (f Forward) String() string {
	switch {
	case f.Method != Tunnel:
		return f.Method.String()
	case f.Tunnel == GUE:
		return fmt.Sprintf("gue:%d", f.Port)
	}
	return f.Tunnel.String()
}
