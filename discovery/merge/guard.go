package merge

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul"
)

// refusal is why a real server from Consul may not have an address;
// allowed when it may.
type refusal uint8

const (
	allowed refusal = iota
	notUnicast
	hostAddress
	vipAddress
	broadcastAddress
	outsideNetworks
)

// guard is the forbidden set and the allow-list that every real server
// from Consul is checked against. Without it, one registration (a VIP from
// the pool, port 22, the director's own address) would make a VIP forward
// to the director's sshd, accepted by lbd's INPUT rule ahead of the host
// firewall.
type guard struct {
	host map[netip.Addr]bool
	// vips maps every VIP, of files and of Consul, to its service.
	vips map[netip.Addr]string
	// allow is [consul.virtual_services] real_server_networks; empty
	// allows any address outside the forbidden set.
	allow []netip.Prefix
	// bcast holds the directed broadcast addresses of allow's IPv4
	// networks.
	bcast map[netip.Addr]bool
}

func newGuard(cfg *config.Config, hostAddrs []netip.Addr) *guard {
	g := &guard{host: make(map[netip.Addr]bool, len(hostAddrs)), vips: map[netip.Addr]string{}, bcast: map[netip.Addr]bool{}}
	for _, a := range hostAddrs {
		g.host[canon(a)] = true
	}
	for i := range cfg.Services {
		g.addVIPs(&cfg.Services[i])
	}
	for _, p := range cfg.Consul.VirtualServices.RealServerNetworks {
		p = canonPrefix(p)
		g.allow = append(g.allow, p)
		if p.Addr().Is4() && p.Bits() <= 30 {
			g.bcast[lastAddr(p)] = true
		}
	}
	return g
}

func (g *guard) addVIPs(s *config.Service) {
	for _, v := range s.VIPs {
		if _, ok := g.vips[canon(v)]; !ok {
			g.vips[canon(v)] = s.Name
		}
	}
}

// check says why a real server from Consul may not have address a.
func (g *guard) check(a netip.Addr) refusal {
	a = canon(a)
	switch {
	case !isUnicast(a):
		return notUnicast
	case g.host[a]:
		return hostAddress
	case g.vips[a] != "":
		return vipAddress
	case g.bcast[a]:
		return broadcastAddress
	case len(g.allow) > 0 && !slices.ContainsFunc(g.allow, func(p netip.Prefix) bool { return p.Contains(a) }):
		return outsideNetworks
	}
	return allowed
}

// why explains a refusal of address a in a Problem.
func (g *guard) why(r refusal, a netip.Addr) string {
	a = canon(a)
	switch r {
	case notUnicast:
		return fmt.Sprintf("address %s is not a routable unicast address (loopback, link-local, multicast, broadcast, unspecified and 0.0.0.0/8 are refused); IPVS NAT cannot forward to it", a)
	case hostAddress:
		return fmt.Sprintf("address %s is this director's own address; a real server from Consul may not point a VIP at the director itself", a)
	case vipAddress:
		return fmt.Sprintf("address %s is a VIP of service %s; a real server from Consul may not be a VIP", a, consul.Quote(g.vips[a]))
	case broadcastAddress:
		return fmt.Sprintf("address %s is the broadcast address of a network of [consul.virtual_services] real_server_networks", a)
	case outsideNetworks:
		return fmt.Sprintf("address %s is outside [consul.virtual_services] real_server_networks (%s); expected a real server in one of them", a, prefixList(g.allow))
	}
	return ""
}

// canon is the form addresses are compared in: without a zone, and IPv4
// for IPv4-mapped IPv6, so that ::ffff:127.0.0.1 is loopback too.
func canon(a netip.Addr) netip.Addr { return a.WithZone("").Unmap() }

func canonPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// isUnicast refuses what IPVS NAT cannot forward to or what reaches the
// director itself, as config refuses it for real servers in files
// (config.ForbiddenRealServer): loopback, link-local, multicast, the
// limited broadcast and unspecified addresses; 0.0.0.0/8, "this host on
// this network" (RFC 1122); and ::/96, the deprecated IPv4-compatible
// addresses that a sit tunnel delivers to the IPv4 address inside.
func isUnicast(a netip.Addr) bool {
	_, bad := config.ForbiddenRealServer(a)
	return !bad
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v |= host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func prefixList(ps []netip.Prefix) string {
	s := ""
	for i, p := range ps {
		if i > 0 {
			s += ", "
		}
		if i == 8 {
			return s + fmt.Sprintf("and %d more", len(ps)-8)
		}
		s += p.String()
	}
	return s
}
