package config

import (
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of ports; First == Last for one port.
type PortRange struct{ First, Last uint16 }

// Len is the number of ports in the range.
func (r PortRange) Len() int { return int(r.Last) - int(r.First) + 1 }

// String renders the range as the configuration writes it.
func (r PortRange) String() string {
	if r.First == r.Last {
		return strconv.Itoa(int(r.First))
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// maxMarked bounds a firewall-mark service's marked VIP:ports (VIPs times
// ports): each is an entry of several of lbd's sets, which share a bound
// of about a million entries.
const maxMarked = 65536

// portChecks lists the check types that connect to a port.
var portChecks = map[CheckType]bool{CheckTCP: true, CheckHTTP: true, CheckHTTPS: true, CheckUDP: true, CheckDNS: true, CheckSCTP: true}

// decodeFWMark decodes a firewall-mark service's key (keepalived's
// virtual_server fwmark): fwmark, the ports lbd marks on the VIPs, and
// family. It runs after the VIPs and before the real servers, whose port
// and family depend on it.
func decodeFWMark(n *node, s *Service) {
	var m int
	if n.integer("fwmark", &m, 1, math.MaxUint32) {
		s.FWMark = uint32(m)
	}
	var f string
	if n.oneOf("family", &f, "ipv4", "ipv6") {
		s.family = 4
		if f == "ipv6" {
			s.family = 6
		}
		if len(s.VIPs) > 0 && family(s.VIPs[0]) != s.family {
			n.errorf("family", "%q but the VIPs are IPv%d; expected no family (the VIPs tell it)", f, family(s.VIPs[0]))
		}
	}
	s.MarkPorts = decodePortRanges(n, "ports")
	switch {
	case n.has("ports") && !n.has("vips"):
		n.errorf("ports", "are the ports lbd marks on the service's VIPs, and it has none; expected vips = [...] with them, or no ports when your own rules mark the packets")
	case n.has("vips") && !n.has("ports"):
		n.errorf("vips", "of a firewall-mark service need ports: lbd marks packets to VIP:port itself; expected ports = [\"80\", \"443\"] (or similar), or no vips when your own mangle rules mark the packets (the addresses they match are yours to bind, or a [[vrrp]] floating address)")
	}
	if marked := len(s.VIPs) * markedPorts(s.MarkPorts); marked > maxMarked {
		n.errorf("ports", "mark %d VIP:ports (%d VIPs, %d ports); expected at most %d per service", marked, len(s.VIPs), markedPorts(s.MarkPorts), maxMarked)
	}
	if n.has("port") {
		n.get("port")
		n.errorf("port", "with fwmark: a firewall-mark service spans ports; expected ports = [...] (the ports lbd marks on the VIPs), or no port")
	}
	if n.has("node_port") {
		n.get("node_port")
		n.errorf("node_port", "with fwmark: NodePort-like services are VIP:port services; expected a separate service for the node port")
	}
}

// decodePortRanges decodes an array of ports and ranges: [80, "443",
// "8000-8100"]. Overlapping ranges are refused: a port is listed once.
func decodePortRanges(n *node, key string) []PortRange {
	var out []PortRange
	var keys []string
	const want = "ports (1-65535) or ranges such as \"8000-8100\""
	n.list(key, want, func(k string, v any) {
		var r PortRange
		ok := false
		switch x := v.(type) {
		case int64:
			ok = x >= 1 && x <= 65535
			r = PortRange{uint16(x), uint16(x)}
		case string:
			var lo, hi uint16
			if lo, hi, ok = parsePortRange(x); !ok && !strings.Contains(x, "-") {
				p, err := strconv.Atoi(strings.TrimSpace(x))
				lo, hi, ok = uint16(p), uint16(p), err == nil && p >= 1 && p <= 65535
			}
			r = PortRange{lo, hi}
		}
		switch {
		case !ok && (isString(v) || isInt(v)):
			n.errorf(k, "%v is not a port or range; expected %s", v, whole(want))
			return
		case !ok:
			n.wrongType(k, v, want)
			return
		}
		for i, o := range out {
			if r.First <= o.Last && o.First <= r.Last {
				n.errorf(k, "%s overlaps %s (%s); expected each port once", r, o, keys[i])
				return
			}
		}
		out, keys = append(out, r), append(keys, k)
	})
	if n.has(key) && len(out) == 0 && isEmptyArray(n, key) {
		n.errorf(key, "is empty; expected at least one of %s", want)
	}
	return out
}

func isInt(v any) bool {
	_, ok := v.(int64)
	return ok
}

func markedPorts(rs []PortRange) int {
	n := 0
	for _, r := range rs {
		n += r.Len()
	}
	return n
}

// checkFWMark refuses, once the whole service is decoded, what a
// firewall-mark service cannot do; without fwmark, its keys.
func checkFWMark(n *node, s *Service) {
	if !n.has("fwmark") {
		for _, key := range []string{"fwmark", "ports", "family"} {
			n.get(key) // accepted keys of every service, in this order
			if n.has(key) {
				n.errorf(key, "is only for firewall-mark services; expected fwmark = N with it (or port = N for a VIP:port service)")
			}
		}
		return
	}
	if n.has("consul") {
		n.errorf("consul", "real servers from Consul are not supported for firewall-mark services (Consul's instances carry a port, and a firewall-mark service's real servers take the packet's own); expected [[service.real_server]] tables")
	}
	if s.knownFamily() == 0 {
		n.errorf("", "firewall-mark service %q has no VIPs and no real servers to tell its family; expected family = \"ipv4\" or \"ipv6\"", s.Name)
	}
	if len(s.VIPs) == 0 {
		own := func(key, what string) {
			if n.has(key) {
				n.errorf(key, "%s, and with your own marks lbd knows no VIP:port of the service; expected vips and ports (lbd then marks the packets), or %s", what, "no "+key)
			}
		}
		own("source_ranges", "filters clients per VIP:port")
		own("announce", "announces VIPs")
		own("consul_register", "registers VIPs")
	}
	checkFWMarkChecks(n, s)
}

// checkFWMarkChecks refuses checks that connect to the real server's port
// without a port of their own: a firewall-mark service's real servers
// have none (keepalived's connect_port).
func checkFWMarkChecks(n *node, s *Service) {
	needs := func(c *HealthCheck) bool { return c != nil && portChecks[c.Type] && c.Port == 0 }
	reported := false
	for i := range s.RealServers {
		c := s.RealServers[i].HealthCheck
		if !needs(c) {
			continue
		}
		if c == s.HealthCheck {
			if !reported {
				key := "health_check.port"
				if !n.has("health_check") {
					key = ""
				}
				n.errorf(key, "a %s check of a firewall-mark service needs the port to check: its real servers have none (the packet keeps its own); expected [service.health_check] with port = N (keepalived's connect_port), or type = \"none\"", c.Type)
				reported = true
			}
			continue
		}
		n.errorf(fmt.Sprintf("real_server[%d].health_check", i), "a %s check of a firewall-mark service's real server needs a port: expected port = N in it, or type = \"none\"", c.Type)
	}
}

// decodeFWMarkRealServerPort decodes a firewall-mark service's real
// server's port: none (or 0), as IPVS keeps the packet's destination port.
func decodeFWMarkRealServerPort(n *node, r *RealServer) {
	v, ok := n.get("port")
	if !ok || v == int64(0) {
		return
	}
	n.errorf("port", "%v: a firewall-mark service's real servers take the packet's own destination port (IPVS keeps it, and the service spans ports); expected port = 0 or no port", v)
}

// parseFWMarkSorry parses a firewall-mark service's sorry server: an
// address, with port 0 if any (see decodeFWMarkRealServerPort).
func parseFWMarkSorry(s string) (netip.AddrPort, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a, 0), true
	}
	ap, err := netip.ParseAddrPort(s)
	return ap, err == nil && ap.Port() == 0
}

// masqueradeOverlap is the bit of mark that lbd's masquerade mark uses,
// or -1.
func masqueradeOverlap(mark uint32, dp Dataplane) int {
	if mark&dp.MasqueradeMark() == 0 {
		return -1
	}
	return bits.TrailingZeros32(dp.MasqueradeMark())
}

// validateFWMarks refuses a mark used twice in one family (IPVS keys a
// firewall-mark virtual server by both) and a mark that has lbd's
// masquerade bit (IPVS matches the whole mark: a packet lbd marks for
// masquerading would miss the service).
func validateFWMarks(cfg *Config, sink *errorSink, globalsOK bool) {
	type key struct {
		mark   uint32
		family int
	}
	seen := map[key]*Service{}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.FWMark == 0 {
			continue
		}
		add := func(format string, args ...any) {
			sink.add(newError(s.at("fwmark"), s.path+".fwmark", format, args...))
		}
		k := key{s.FWMark, s.Family()}
		if o, dup := seen[k]; dup {
			add("%d is the mark of service %q too (at %s), in the same family (IPv%d); expected one service per mark and family", s.FWMark, o.Name, o.at("fwmark"), k.family)
		} else {
			seen[k] = s
		}
		if bit := masqueradeOverlap(s.FWMark, cfg.Dataplane); globalsOK && bit >= 0 {
			add("%d (%#x) has bit %d set, lbd's masquerade bit ([dataplane] masquerade_bit = %d): IPVS matches a firewall-mark service on the whole mark, so a packet lbd marks for masquerading would miss it; expected a mark without bit %d, or another masquerade_bit", s.FWMark, s.FWMark, bit, bit, bit)
		}
	}
}
