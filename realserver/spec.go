// Package realserver sets up and checks the real-server side of direct
// routing (DR) and tunnelling (TUN): what `lbd realserver` does on a real
// server, not on the director.
//
// The decisions are values: Check turns a Spec and a snapshot of the box
// (State) into a Report whose failing items carry the Actions that fix
// them; Setup applies those through a Kernel and records them so that
// Undo can take back exactly what it did.
package realserver

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/lbdproject/lbd/lvs"
)

// Spec is what a real server is set up for: the director's forwarding
// method and the VIPs it sends to this box.
type Spec struct {
	Method  lvs.Method // lvs.DR or lvs.Tunnel
	Tunnel  lvs.Encap  // lvs.Tunnel only
	GUEPort uint16     // GUE's UDP port; lvs.GUE only
	VIPs    []netip.Addr
}

// Validate says what in s cannot be set up.
func (s Spec) Validate() error {
	var errs []error
	switch s.Method {
	case lvs.DR, lvs.Tunnel:
	default:
		errs = append(errs, fmt.Errorf("method %s: expected dr or tun (a NAT real server needs nothing on its side)", s.Method))
	}
	if s.Method == lvs.Tunnel {
		switch s.Tunnel {
		case lvs.IPIP, lvs.GRE:
		case lvs.GUE:
			if s.GUEPort == 0 {
				errs = append(errs, errors.New("gue needs the UDP port the director sends to (the service's tunnel_port), e.g. 6080"))
			}
		default:
			errs = append(errs, fmt.Errorf("tunnel %s: expected ipip, gue or gre", s.Tunnel))
		}
	}
	if len(s.VIPs) == 0 {
		errs = append(errs, errors.New("no VIP: expected at least one --vip"))
	}
	seen := make(map[netip.Addr]bool, len(s.VIPs))
	for _, v := range s.VIPs {
		switch {
		case !v.IsValid() || v.Is4In6():
			errs = append(errs, fmt.Errorf("VIP %s: expected an IPv4 or IPv6 address", v))
		case v.IsUnspecified() || v.IsLoopback() || v.IsMulticast() || v.IsLinkLocalUnicast():
			errs = append(errs, fmt.Errorf("VIP %s: expected a unicast address that clients reach (not loopback, link-local, multicast or unspecified)", v))
		case seen[v]:
			errs = append(errs, fmt.Errorf("VIP %s given twice", v))
		}
		seen[v] = true
	}
	return errors.Join(errs...)
}

// families reports which address families the VIPs have.
func (s Spec) families() (v4, v6 bool) {
	for _, v := range s.VIPs {
		if v.Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	return v4, v6
}

// tunnelDevice is the kernel's fallback device that decapsulates what the
// director sends for VIPs of one family, and the module that makes it.
// IPVS's tunnels are same-family: IPIP carries IPv4 in IPv4 (tunl0) and
// IPv6 in IPv6 (ip6tnl0); GUE carries the same inside UDP, and after the
// fou port has stripped the UDP and GUE headers the inner packet still
// goes through that device; GRE carries them in GRE (gre0, ip6gre0).
func (s Spec) tunnelDevice(v6 bool) (link, module string) {
	switch {
	case s.Tunnel == lvs.GRE && v6:
		return "ip6gre0", "ip6_gre"
	case s.Tunnel == lvs.GRE:
		return "gre0", "ip_gre"
	case v6:
		return "ip6tnl0", "ip6_tunnel"
	}
	return "tunl0", "ipip"
}

// hostPrefix is v as the single-address prefix that goes on lo.
func hostPrefix(v netip.Addr) netip.Prefix {
	return netip.PrefixFrom(v, v.BitLen())
}
