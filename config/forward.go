package config

import (
	"slices"

	"github.com/lbdproject/lbd/lvs"
)

// The words of forward, tunnel_type and tunnel_checksum, in lvs's order.
var (
	forwardWords  = []string{"nat", "dr", "tun"}
	tunnelWords   = []string{"ipip", "gue", "gre"}
	checksumWords = []string{"none", "checksum", "remote"}
)

// methodWord is how the configuration writes m.
func methodWord(m lvs.Method) string {
	if int(m) < len(forwardWords) {
		return forwardWords[m]
	}
	return m.String()
}

// decodeForward decodes the service's forwarding method (keepalived's
// lb_kind) and, for tunnels, the encapsulation its real servers inherit.
func decodeForward(n *node, s *Service) {
	var v string
	if n.oneOf("forward", &v, forwardWords...) {
		s.Forward = lvs.Forward{Method: lvs.Method(slices.Index(forwardWords, v))}
	}
	decodeTunnel(n, &s.Forward, "service")
}

// decodeRealServerForward decodes a real server's own forward and tunnel
// keys over its service's, and refuses what its method cannot do.
func decodeRealServerForward(n *node, s *Service, r *RealServer) {
	r.Forward = s.Forward
	var v string
	if n.oneOf("forward", &v, forwardWords...) {
		m := lvs.Method(slices.Index(forwardWords, v))
		switch {
		case m == lvs.NAT && s.Forward.Method != lvs.NAT:
			n.errorf("forward", "\"nat\" in service %q, which forwards by %s: NAT may not share a service with dr or tun (NAT's replies come back through the director, theirs go straight to the client); expected \"dr\" or \"tun\", or the real server in a NAT service of its own", s.Name, methodWord(s.Forward.Method))
		case m != lvs.NAT && s.Forward.Method == lvs.NAT:
			n.errorf("forward", "%q in service %q, which forwards by nat: NAT may not share a service with dr or tun (NAT's replies come back through the director, theirs go straight to the client); expected forward = %q on the service itself (its real servers may then mix dr and tun), or no forward here", v, s.Name, v)
		case m != r.Forward.Method:
			// A tunnel's options are inherited only from a tunnel.
			r.Forward = lvs.Forward{Method: m}
		}
	}
	decodeTunnel(n, &r.Forward, "real server")
	if r.Forward.Method != lvs.NAT && n.has("port") && r.Port != s.Port && s.Port != 0 {
		n.errorf("port", "%d differs from the service's port %d; %s cannot map ports (the packet reaches the real server with the VIP's port): expected port = %d or no port", r.Port, s.Port, methodName(r.Forward.Method), s.Port)
	}
}

// decodeTunnel decodes tunnel_type, tunnel_port and tunnel_checksum onto
// f, whose Method is already this level's (what says which level: the
// service or a real server). Inherited options that the encapsulation
// does not take are dropped; written ones are refused.
func decodeTunnel(n *node, f *lvs.Forward, what string) {
	notTunnel := func(key string) {
		n.errorf(key, "is only for tunnels, and this %s forwards by %s; expected forward = \"tun\" or no %s", what, methodWord(f.Method), key)
	}
	var v string
	if n.oneOf("tunnel_type", &v, tunnelWords...) {
		if f.Method != lvs.Tunnel {
			notTunnel("tunnel_type")
		} else {
			f.Tunnel = lvs.Encap(slices.Index(tunnelWords, v))
		}
	}
	var port uint16
	if n.port("tunnel_port", &port) {
		switch {
		case f.Method != lvs.Tunnel:
			notTunnel("tunnel_port")
		case f.Tunnel != lvs.GUE:
			n.errorf("tunnel_port", "is GUE's UDP port, and this %s's tunnel is %s; expected tunnel_type = \"gue\" or no tunnel_port", what, f.Tunnel)
		default:
			f.Port = port
		}
	}
	if n.oneOf("tunnel_checksum", &v, checksumWords...) {
		switch {
		case f.Method != lvs.Tunnel:
			notTunnel("tunnel_checksum")
		case f.Tunnel == lvs.IPIP:
			n.errorf("tunnel_checksum", "IPIP has no checksum option; expected tunnel_type = \"gue\" or \"gre\", or no tunnel_checksum")
		case f.Tunnel == lvs.GRE && v == "remote":
			n.errorf("tunnel_checksum", "\"remote\" (remote checksum offload) is GUE's only; expected \"none\" or \"checksum\" for GRE")
		default:
			f.Checksum = lvs.Checksum(slices.Index(checksumWords, v))
		}
	}
	if f.Method != lvs.Tunnel {
		return
	}
	if f.Tunnel != lvs.GUE {
		f.Port = 0
	}
	if f.Tunnel == lvs.IPIP || f.Tunnel == lvs.GRE && f.Checksum == lvs.RemoteChecksum {
		f.Checksum = lvs.NoChecksum
	}
	if f.Tunnel == lvs.GUE && f.Port == 0 && n.has("tunnel_type") {
		n.errorf("tunnel_type", "\"gue\" needs the UDP port the real servers receive GUE on (their fou port); expected tunnel_port = 6080 (or similar)")
	}
}

// checkForward refuses, for a DR or tunnel service, what only NAT can do.
// It runs once the whole service is decoded.
func checkForward(n *node, s *Service) {
	m := s.Forward.Method
	if m == lvs.NAT {
		return
	}
	how := methodName(m)
	if n.has("snat") {
		n.errorf("snat", "chooses masquerading, which only NAT does: with forward = %q the real servers answer the client directly and always see its address; expected no snat", methodWord(m))
	}
	if n.has("node_port") {
		n.errorf("forward", "%q with node_port: NodePort-like services stay NAT (their node addresses are the box's own, which real servers cannot hold, and their replies must come back through it); expected forward = \"nat\" (or none), or a separate service without node_port", methodWord(m))
	}
	if ss := s.SorryServer; ss != nil && ss.Port() != s.Port {
		n.errorf("sorry_server", "port %d differs from the service's port %d; the sorry server is forwarded to by %s too, which cannot map ports: expected port %d", ss.Port(), s.Port, how, s.Port)
	}
	if c := s.Consul; c != nil {
		if c.Port != 0 && c.Port != s.Port {
			n.errorf("consul.port", "%d differs from the service's port %d; %s cannot map ports: expected port = %d or no port (Consul's instances then get the service's port)", c.Port, s.Port, how, s.Port)
		}
		// The registered ports mean nothing to DR or a tunnel: the packet
		// keeps the VIP's port, as ipvsadm sets it for them.
		c.Port = s.Port
	}
}

// methodName names m in a sentence.
func methodName(m lvs.Method) string {
	switch m {
	case lvs.DR:
		return "direct routing"
	case lvs.Tunnel:
		return "tunnelling"
	}
	return "NAT"
}

// familyReason says why a real server of the other family is refused.
func familyReason(m lvs.Method) string {
	switch m {
	case lvs.DR:
		return "direct routing cannot cross families (the real server gets the packet as the client sent it)"
	case lvs.Tunnel:
		return "lbd's tunnels are same-family only (the kernel's sync daemons refuse a mixed-family destination)"
	}
	return "IPVS NAT cannot mix families"
}
