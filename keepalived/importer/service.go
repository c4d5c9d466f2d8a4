package importer

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// endpoint is what one keepalived virtual server (or group member) is
// keyed by: addresses with a port, or a firewall mark.
type endpoint struct {
	vips   []netip.Addr
	port   int
	fwmark uint64
	name   string // the name's stem
}

func (e endpoint) family() int {
	if len(e.vips) > 0 && e.vips[0].Is6() {
		return 6
	}
	return 4
}

// virtualServer maps one virtual_server block to one or more services
// (a group's members of different ports or families are several).
func (im *importer) virtualServer(n *conf.Node) {
	eps, ok := im.endpoints(n)
	if !ok {
		return
	}
	for _, ep := range eps {
		im.service(n, ep)
	}
}

// endpoints reads `virtual_server IP PORT`, `fwmark N` or `group NAME`.
func (im *importer) endpoints(n *conf.Node) ([]endpoint, bool) {
	a0, _ := n.Arg(0)
	a1, ok1 := n.Arg(1)
	switch {
	case a0 == "fwmark" && ok1:
		mark, err := strconv.ParseUint(a1, 0, 32)
		if err != nil || mark == 0 {
			im.rep.notMapped(n, "firewall mark %q is not 1–4294967295", a1)
			return nil, false
		}
		return []endpoint{{fwmark: mark, name: "fwmark-" + strconv.FormatUint(mark, 10)}}, true
	case a0 == "group" && ok1:
		g := im.groups[a1]
		if g == nil {
			im.rep.notMapped(n, "no virtual_server_group %q", a1)
			return nil, false
		}
		return im.groupEndpoints(g, a1), true
	case ok1:
		addr, err := netip.ParseAddr(a0)
		port, perr := strconv.ParseUint(a1, 10, 16)
		if err != nil || addr.Zone() != "" || perr != nil || port == 0 {
			im.rep.notMapped(n, "not an address and a port 1–65535")
			return nil, false
		}
		addr = addr.Unmap()
		return []endpoint{{vips: []netip.Addr{addr}, port: int(port), name: "vs-" + addrName(addr) + "-" + a1}}, true
	}
	im.rep.notMapped(n, "expected `virtual_server IP PORT`, `fwmark N` or `group NAME`")
	return nil, false
}

// addrName is an address as part of a service name (':' is not allowed).
func addrName(a netip.Addr) string { return strings.ReplaceAll(a.String(), ":", "-") }

// groupEndpoints reads a group's members: addresses (with last-part
// ranges) grouped by port and family, in order of first appearance, and
// firewall marks.
func (im *importer) groupEndpoints(g *conf.Node, name string) []endpoint {
	var eps []endpoint
	index := map[string]int{}
	for i := range g.Children {
		m := &g.Children[i]
		if m.Keyword == "fwmark" {
			a, _ := m.Arg(0)
			mark, err := strconv.ParseUint(a, 0, 32)
			if err != nil || mark == 0 {
				im.rep.notMapped(m, "firewall mark %q is not 1–4294967295", a)
				continue
			}
			eps = append(eps, endpoint{fwmark: mark, name: "group-" + name + "-fwmark-" + a})
			continue
		}
		addrs, port, err := member(m)
		if err != nil {
			im.rep.notMapped(m, "group member: %v", err)
			continue
		}
		key := fmt.Sprintf("%d/%d", port, family(addrs[0]))
		j, ok := index[key]
		if !ok {
			j = len(eps)
			index[key] = j
			eps = append(eps, endpoint{port: port, name: "group-" + name})
		}
		eps[j].vips = append(eps[j].vips, addrs...)
	}
	if len(eps) > 1 {
		for i := range eps {
			if eps[i].fwmark == 0 {
				eps[i].name += fmt.Sprintf("-%d-ipv%d", eps[i].port, eps[i].family())
			}
		}
	}
	return eps
}

func family(a netip.Addr) int {
	if a.Is6() {
		return 6
	}
	return 4
}

// maxRange bounds a group member's range (an IPv6 range may span 65,536).
const maxRange = 1 << 16

// member reads `IP PORT` or `IP-END PORT`: END replaces the last octet
// (IPv4, decimal) or the last 16-bit group (IPv6, hexadecimal), as
// keepalived's inet_stor.
func member(m *conf.Node) ([]netip.Addr, int, error) {
	if len(m.Args) != 1 {
		return nil, 0, fmt.Errorf("expected `IP PORT`, `IP-END PORT` or `fwmark N`")
	}
	port, err := strconv.ParseUint(m.Args[0], 10, 16)
	if err != nil || port == 0 {
		return nil, 0, fmt.Errorf("port %q is not 1–65535", m.Args[0])
	}
	text, end, ranged := strings.Cut(m.Keyword, "-")
	start, err := netip.ParseAddr(text)
	if err != nil || start.Zone() != "" {
		return nil, 0, fmt.Errorf("%q is not an IP address", text)
	}
	start = start.Unmap()
	if !ranged {
		return []netip.Addr{start}, int(port), nil
	}
	base, bits := 10, 8
	if start.Is6() {
		base, bits = 16, 16
	}
	last, err := strconv.ParseUint(end, base, bits)
	b := start.AsSlice()
	first := uint64(b[len(b)-1])
	if start.Is6() {
		first = uint64(b[14])<<8 | first
	}
	if err != nil || last < first {
		return nil, 0, fmt.Errorf("range end %q is not a number from %d up to the last part's maximum", end, first)
	}
	var out []netip.Addr
	for v := first; v <= last && len(out) < maxRange; v++ {
		if start.Is6() {
			b[14] = byte(v >> 8)
		}
		b[len(b)-1] = byte(v)
		a, _ := netip.AddrFromSlice(b)
		out = append(out, a)
	}
	return out, int(port), nil
}

// uniqueName makes a valid, unused service name from stem.
func (im *importer) uniqueName(stem string) string {
	var b strings.Builder
	for _, r := range stem {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	base := b.String()
	if len(base) > 55 {
		base = base[:55] // room for a "-NNNNNNN" suffix
	}
	name := base
	for i := 2; im.names[name]; i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	im.names[name] = true
	return name
}
