package desired

import "net/netip"

// Serving says which VIPs this box serves: binds on the dummy interface
// and announces. A VIP it does not serve keeps its virtual servers, rules
// and set entries (a standby takes over by binding the address, and
// connections synced from the active box find their virtual server), but
// is neither bound nor answered for by ARP. The zero value serves every
// VIP: a box on its own. A failover role or a BGP decision narrows it.
type Serving struct {
	limited bool
	vips    map[netip.Addr]bool
}

// ServeOnly returns a Serving of exactly vips (none when empty).
func ServeOnly(vips ...netip.Addr) Serving {
	s := Serving{limited: true, vips: make(map[netip.Addr]bool, len(vips))}
	for _, v := range vips {
		s.vips[v] = true
	}
	return s
}

// Serves reports whether this box serves vip.
func (s Serving) Serves(vip netip.Addr) bool { return !s.limited || s.vips[vip] }

// filter returns the served addresses of addrs (addrs itself when all are).
func (s Serving) filter(addrs []netip.Addr) []netip.Addr {
	if !s.limited {
		return addrs
	}
	var out []netip.Addr
	for _, a := range addrs {
		if s.vips[a] {
			out = append(out, a)
		}
	}
	return out
}
