package desired

import (
	"net/netip"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/syncd"
)

// Serving says which VIPs this box serves: binds on the dummy interface
// and announces. A VIP it does not serve keeps its virtual servers, rules
// and set entries (a standby takes over by binding the address, and
// connections synced from the active box find their virtual server), but
// is neither bound nor answered for by ARP. The zero value serves every
// VIP: a box on its own. A failover role or a BGP decision narrows it.
type Serving struct {
	limited bool
	vips    map[netip.Addr]bool
	// held names the services whose VIPs another box holds (their VRRP
	// instance is not master here); heldAll holds every service's.
	held    map[string]bool
	heldAll bool
	// heldVIPs is held resolved against the services (see resolve).
	heldVIPs map[netip.Addr]bool
}

// ServeOnly returns a Serving of exactly vips (none when empty).
func ServeOnly(vips ...netip.Addr) Serving {
	s := Serving{limited: true, vips: make(map[netip.Addr]bool, len(vips))}
	for _, v := range vips {
		s.vips[v] = true
	}
	return s
}

// HoldServices returns a Serving of every VIP except those of the named
// services (all services' with all): a standby of a failover pair.
// Services sharing a VIP move together (the configuration refuses
// otherwise), so a VIP is held when any service of it is.
func HoldServices(all bool, names ...string) Serving {
	s := Serving{heldAll: all, held: make(map[string]bool, len(names))}
	for _, n := range names {
		s.held[n] = true
	}
	return s
}

// Serves reports whether this box serves vip.
func (s Serving) Serves(vip netip.Addr) bool {
	return !s.heldVIPs[vip] && (!s.limited || s.vips[vip])
}

// resolve turns held services into held VIPs, for Serves and filter.
func (s Serving) resolve(services []config.Service) Serving {
	if !s.heldAll && len(s.held) == 0 {
		return s
	}
	s.heldVIPs = map[netip.Addr]bool{}
	for i := range services {
		if s.heldAll || s.held[services[i].Name] {
			for _, v := range services[i].VIPs {
				s.heldVIPs[v] = true
			}
		}
	}
	return s
}

// filter returns the served addresses of addrs (addrs itself when all are).
func (s Serving) filter(addrs []netip.Addr) []netip.Addr {
	if !s.limited && len(s.heldVIPs) == 0 {
		return addrs
	}
	var out []netip.Addr
	for _, a := range addrs {
		if s.Serves(a) {
			out = append(out, a)
		}
	}
	return out
}

// Floating is an address that moves between the boxes of a failover pair
// with a VRRP instance (keepalived's virtual_ipaddress): bound on its own
// link, not on lbd's dummy link, while this box is master, and removed
// while it is not. The configuration owns it: lbd removes a held one
// whoever bound it, as keepalived does.
type Floating struct {
	Prefix netip.Prefix
	Link   string
	Held   bool
}

// syncDaemons are the sync daemons [ha.ipvs_sync] asks for: both roles on
// each box, so that whichever is master sends and the other receives,
// with no daemon to restart at a failover.
func syncDaemons(s config.IPVSSync) []syncd.Daemon {
	if !s.Enabled {
		return nil
	}
	d := syncd.Daemon{Interface: s.Interface, SyncID: s.SyncID, MaxLen: s.MaxPacketLength, Group: s.Group, Port: s.Port, TTL: s.TTL}
	m, b := d, d
	m.Role, b.Role = syncd.Master, syncd.Backup
	return []syncd.Daemon{m, b}
}
