package config

import (
	"fmt"
	"net/netip"
	"strconv"

	"github.com/lbdproject/lbd/lvs"
)

// validate runs the checks that span services and files, on whatever
// decoded: a problem elsewhere hides none of them. globalsOK says that the
// main file's global settings decoded without problems; checks against
// them are skipped otherwise, as the defaults in their place could report
// problems that are not there.
func validate(cfg *Config, sink *errorSink, globalsOK bool) {
	type claim struct {
		service int // index in cfg.Services
		pos     Pos
	}
	// what is claimed: a VIP:port/protocol, or a node port/protocol (with
	// no address).
	type what struct {
		ap    netip.AddrPort
		proto lvs.Protocol
	}
	names := make(map[string]Pos, len(cfg.Services))
	claims := make(map[what]claim, len(cfg.Services))
	add := func(s *Service, key, format string, args ...any) {
		sink.add(newError(s.at(key), s.path+"."+key, format, args...))
	}
	claimOnce := func(i int, w what, key string) {
		s := &cfg.Services[i]
		c, dup := claims[w]
		if dup && c.service == i {
			return // a VIP listed twice, refused where it is decoded
		}
		if dup {
			desc := fmt.Sprintf("%s/%s", w.ap, w.proto)
			if !w.ap.Addr().IsValid() {
				desc = fmt.Sprintf("node port %d/%s", w.ap.Port(), w.proto)
			}
			add(s, key, "%s is claimed by service %q here and by service %q at %s; expected each VIP:port/protocol in one service", desc, s.Name, cfg.Services[c.service].Name, c.pos)
			return
		}
		claims[w] = claim{i, s.at(key)}
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if p, dup := names[s.Name]; dup && s.Name != "" {
			add(s, "name", "service name %q is already used by the service at %s; expected unique names", s.Name, p)
		} else if !dup {
			names[s.Name] = s.at("name")
		}
		for j, v := range s.VIPs {
			if s.FWMark == 0 {
				claimOnce(i, what{netip.AddrPortFrom(v, s.Port), s.Protocol}, s.vipKey(j))
				continue
			}
			// What lbd marks is claimed port by port: a VIP:port in two
			// services, marked or not, would be ambiguous.
			for _, r := range s.MarkPorts {
				for p := int(r.First); p <= int(r.Last); p++ {
					claimOnce(i, what{netip.AddrPortFrom(v, uint16(p)), s.Protocol}, s.vipKey(j))
				}
			}
		}
		if s.NodePort == 0 {
			continue
		}
		claimOnce(i, what{netip.AddrPortFrom(netip.Addr{}, s.NodePort), s.Protocol}, "node_port")
		d := cfg.Dataplane
		if !globalsOK {
			continue
		}
		if len(d.NodeCIDRs) == 0 {
			add(s, "node_port", "service %q is NodePort-like but no node addresses are configured; expected node_cidrs = [...] in [dataplane] of %s", s.Name, whole(cfg.Files[0]))
		}
		if s.NodePort < d.NodePortMin || s.NodePort > d.NodePortMax {
			add(s, "node_port", "%d is outside node_port_range %d-%d; expected a port inside it", s.NodePort, d.NodePortMin, d.NodePortMax)
		}
	}
	validateFWMarks(cfg, sink, globalsOK)
	refuseVIPsAsRealServers(cfg, sink)
	validateVRRP(cfg, sink, globalsOK)
	validateHA(cfg, sink, globalsOK)
}

// refuseVIPsAsRealServers refuses a real server or sorry server that is a
// VIP of any service: IPVS would forward the VIP's traffic to itself.
func refuseVIPsAsRealServers(cfg *Config, sink *errorSink) {
	vips := make(map[netip.Addr]string)
	for i := range cfg.Services {
		for _, v := range cfg.Services[i].VIPs {
			if _, ok := vips[v]; !ok {
				vips[v] = cfg.Services[i].Name
			}
		}
	}
	if len(vips) == 0 {
		return
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		for j := range s.RealServers {
			r := &s.RealServers[j]
			// One of the service's own VIPs is refused where it is decoded.
			if owner, ok := vips[r.Address]; ok && owner != s.Name && !isVIPOf(s, r.Address) {
				sink.add(newError(r.Pos, s.path+".real_server["+strconv.Itoa(j)+"].address",
					"%s is a VIP of service %q; a real server cannot be a VIP of this box (IPVS would forward the traffic to itself): expected the address of a real server", r.Address, owner))
			}
		}
		if s.SorryServer != nil {
			if owner, ok := vips[s.SorryServer.Addr()]; ok {
				sink.add(newError(s.sorryPos, s.path+".sorry_server",
					"%s is a VIP of service %q; a sorry server cannot be a VIP of this box: expected the address of a real server", s.SorryServer.Addr(), owner))
			}
		}
	}
}

func isVIPOf(s *Service, a netip.Addr) bool {
	for _, v := range s.VIPs {
		if v == a {
			return true
		}
	}
	return false
}

// ForbiddenRealServer reports why addr can never be a real server, on any
// box: loopback, link-local, multicast, broadcast, unspecified and "this
// network" (0.0.0.0/8) addresses, and their IPv4-mapped IPv6 forms. IPVS NAT
// cannot forward to them. reason names the class for an error message
// ("loopback"); bad is false for an address that may be one. The box's own
// addresses and VIPs are refused elsewhere: they are not known here.
func ForbiddenRealServer(addr netip.Addr) (reason string, bad bool) {
	a := addr.Unmap()
	switch {
	case !a.IsValid():
		return "invalid", true
	case a.IsUnspecified():
		return "unspecified", true
	case a.IsLoopback():
		return "loopback", true
	case a.IsLinkLocalUnicast():
		return "link-local", true
	case a.IsMulticast():
		return "multicast", true
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast", true
	case a.Is4() && a.As4()[0] == 0:
		return "\"this network\" (0.0.0.0/8)", true
	case a.Is6() && [12]byte(a.AsSlice()[:12]) == [12]byte{}:
		return "IPv4-compatible IPv6 (::/96, deprecated)", true
	}
	return "", false
}
