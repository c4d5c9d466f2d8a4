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
	"strings"
)

// Protocol is a virtual service's transport protocol.
type Protocol string

const (
	TCP Protocol = "tcp"
	UDP Protocol = "udp"
)

// Key identifies an IPVS virtual server.
type Key struct {
	Addr     netip.Addr
	Port     uint16
	Protocol Protocol
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), k.Protocol)
}

// Compare orders keys by address, port, then protocol.
func (k Key) Compare(o Key) int {
	return cmp.Or(k.Addr.Compare(o.Addr), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Protocol, o.Protocol))
}

// HealthKey identifies one real server of one lbd service: health is
// checked, and reported, per service, since two services may check the
// same address differently.
type HealthKey struct {
	Service string
	Addr    netip.AddrPort
}

// ParseKey parses a key as Key.String writes it: "192.0.2.10:80/tcp".
func ParseKey(s string) (Key, error) {
	ap, proto, ok := strings.Cut(s, "/")
	a, err := netip.ParseAddrPort(ap)
	if !ok || err != nil || (proto != string(TCP) && proto != string(UDP)) {
		return Key{}, fmt.Errorf("bad virtual server key %q", s)
	}
	return Key{Addr: a.Addr(), Port: a.Port(), Protocol: Protocol(proto)}, nil
}
