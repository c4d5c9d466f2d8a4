package importer

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// inst is one vrrp_instance being mapped to a [[vrrp]] table.
type inst struct {
	n         *conf.Node
	name      string
	t         table // keys in config-reference order, written at the end
	version   int
	addresses []string
	excluded  []string
	services  []string
	ipv6      bool
	iface     string
	// moved are the service VIPs among its addresses, with their dev.
	moved []movedVIP
}

// movedVIP is a service VIP an instance carries, and the interface
// keepalived bound it on (empty: the instance's).
type movedVIP struct {
	node     *conf.Node
	services []string
	dev      string
}

// vrrp maps the vrrp_instance and vrrp_sync_group blocks, after the
// services (an instance's addresses may be their VIPs).
func (im *importer) vrrp(root *conf.Node) {
	version := 2 // keepalived's default
	for _, g := range root.ChildrenOf("global_defs") {
		if c := g.Child("vrrp_version"); c != nil {
			if a, _ := c.Arg(0); a == "3" {
				version = 3
			}
		}
	}
	names := map[string]string{} // keepalived's instance name → lbd's
	for _, n := range root.ChildrenOf("vrrp_instance") {
		im.instance(n, version, names)
	}
	for _, n := range root.ChildrenOf("vrrp_sync_group") {
		im.syncGroup(n, names)
	}
}

// instance maps one vrrp_instance to a [[vrrp]] table.
func (im *importer) instance(n *conf.Node, version int, names map[string]string) {
	kname, _ := n.Arg(0)
	v := &inst{n: n, version: version, name: im.vrrpName(kname)}
	names[kname] = v.name
	var t table
	preempt := true // keepalived preempts unless nopreempt
	var advert *conf.Node
	for i := range n.Children {
		c := &n.Children[i]
		arg, _ := c.Arg(0)
		switch c.Keyword {
		case "interface":
			v.iface = arg
			im.vrrpValue(&t, c)
		case "virtual_router_id", "priority", "unicast_src_ip", "garp_master_repeat", "garp_master_delay", "preempt_delay":
			im.vrrpValue(&t, c)
		case "version": // keepalived's instance keyword; vrrp_version is global_defs'
			if n, err := strconv.Atoi(arg); err == nil && (n == 2 || n == 3) {
				v.version = n
			} else {
				im.rep.notMapped(c, "version %q is not 2 or 3", arg)
			}
		case "lvs_sync_daemon_interface":
			im.syncDaemon(c)
		case "advert_int":
			advert = c
		case "nopreempt":
			preempt = false
		case "state":
			if strings.EqualFold(arg, "MASTER") {
				im.rep.differs(c, "lbd starts every instance as backup and lets the election decide (keepalived's MASTER claims the addresses at once)")
			}
		case "virtual_ipaddress":
			v.addresses = im.vrrpAddresses(c, v, false)
		case "virtual_ipaddress_excluded":
			v.excluded = im.vrrpAddresses(c, v, true)
		case "unicast_peer":
			t.set("unicast_peers", tomlStrings(im.children(c)))
		case "authentication":
			im.vrrpAuth(&t, c, v)
		case "track_interface":
			im.trackInterfaces(&t, c)
		case "notify", "notify_master", "notify_backup", "notify_fault", "notify_stop":
			im.notify(&t, c)
		default:
			im.vrrpOther(c)
		}
	}
	im.announce(v)
	im.finishInstance(v, t, preempt, advert)
}

func (im *importer) vrrpValue(t *table, c *conf.Node) {
	arg, _ := c.Arg(0)
	switch c.Keyword {
	case "interface", "unicast_src_ip":
		key := map[string]string{"interface": "interface", "unicast_src_ip": "unicast_source"}[c.Keyword]
		t.str(key, arg)
	case "garp_master_delay", "preempt_delay":
		d, ok := seconds(arg)
		if !ok {
			im.rep.notMapped(c, "%q is not a number of seconds", arg)
			return
		}
		t.set(c.Keyword, tomlDuration(d))
	case "priority":
		if arg == "255" {
			im.rep.differs(c, "lbd never owns the addresses it moves (priority 255): written as 254")
			arg = "254"
		}
		fallthrough
	default:
		if _, err := strconv.ParseUint(arg, 10, 16); err != nil {
			im.rep.notMapped(c, "%q is not a number", arg)
			return
		}
		t.set(c.Keyword, arg)
	}
}

// vrrpNotMapped are instance keywords lbd has no counterpart for.
var vrrpNotMapped = map[string]string{
	"track_script":               "lbd tracks its services' health (track_services), not scripts",
	"track_file":                 "lbd has no tracked files",
	"track_process":              "lbd has no tracked processes",
	"track_bfd":                  "lbd has no BFD",
	"use_vmac":                   "lbd has no VRRP MAC interfaces",
	"vmac_xmit_base":             "lbd has no VRRP MAC interfaces",
	"mcast_src_ip":               "lbd sends multicast adverts from the interface's address",
	"dont_track_primary":         "lbd always tracks the instance's interface",
	"smtp_alert":                 "lbd sends no mail: alert on its metrics",
	"virtual_routes":             "lbd does not manage routes",
	"virtual_rules":              "lbd does not manage routing rules",
	"accept":                     "lbd does not add or remove the addresses' accept rules",
	"no_accept":                  "lbd does not add or remove the addresses' accept rules",
	"strict_mode":                "lbd has no strict mode",
	"native_ipv6":                "lbd decides the family from the addresses",
	"notify_master_rx_lower_pri": "lbd has no such notification",
	"garp_lower_prio_repeat":     "lbd repeats gratuitous ARP per garp_master_repeat only",
	"garp_lower_prio_delay":      "lbd repeats gratuitous ARP per garp_master_delay only",
	"garp_master_refresh":        "lbd does not refresh gratuitous ARP periodically",
	"garp_master_refresh_repeat": "lbd does not refresh gratuitous ARP periodically",
}

func (im *importer) vrrpOther(c *conf.Node) {
	switch {
	case vrrpNotMapped[c.Keyword] != "":
		im.rep.notMapped(c, "%s", vrrpNotMapped[c.Keyword])
	case c.Keyword == "debug":
		im.rep.add(c, Unneeded, "lbd's log level is its own")
	default:
		im.rep.unknown(c, "a vrrp_instance")
	}
}

// children are the first words of a block's statements.
func (im *importer) children(c *conf.Node) []string {
	var out []string
	for i := range c.Children {
		k := &c.Children[i]
		out = append(out, k.Keyword)
		if len(k.Args) > 0 {
			im.rep.notMapped(k, "lbd takes the peer's address only")
		}
	}
	return out
}

// vrrpAddresses reads virtual_ipaddress: "ADDR[/LEN] [dev IF]"; other
// options are reported. An address that is a VIP of an imported service
// moves with the instance through `services` (lbd binds it on its own
// link with the service); from virtual_ipaddress it stays in the list too,
// so that the adverts carry what keepalived's do.
func (im *importer) vrrpAddresses(c *conf.Node, v *inst, excluded bool) []string {
	var out []string
	seen := map[netip.Addr]*conf.Node{}
	for i := range c.Children {
		k := &c.Children[i]
		p, err := netip.ParsePrefix(k.Keyword)
		if err != nil {
			a, aerr := netip.ParseAddr(k.Keyword)
			if aerr != nil {
				im.rep.notMapped(k, "%q is not an address", k.Keyword)
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		v.ipv6 = v.ipv6 || p.Addr().Is6()
		if prev := seen[p.Addr()]; prev != nil {
			im.rep.notMapped(k, "already listed at %s: lbd takes each address once", prev.Pos)
			continue
		}
		seen[p.Addr()] = k
		dev := ""
		if len(k.Args) >= 2 && k.Args[0] == "dev" {
			dev = k.Args[1]
		}
		if svc := im.servicesOf(p.Addr()); len(svc) > 0 {
			im.moveServices(k, v, svc, dev, excluded)
			if excluded {
				continue
			}
		}
		entry := p.String()
		if dev != "" {
			entry += " dev " + dev
		}
		if len(k.Args) > 0 && (k.Args[0] != "dev" || len(k.Args) > 2) {
			im.rep.notMapped(k, "lbd takes ADDR[/LEN] [dev IF]; the other options are not carried")
		}
		out = append(out, entry)
	}
	return out
}

// moveServices has the instance carry the services whose VIP k is, and
// announce it by ARP (NDP) on its interface as keepalived's master does.
func (im *importer) moveServices(k *conf.Node, v *inst, names []string, dev string, excluded bool) {
	for _, s := range names {
		if !contains(v.services, s) {
			v.services = append(v.services, s)
		}
	}
	v.moved = append(v.moved, movedVIP{k, names, dev})
	if excluded {
		im.rep.differs(k, "a VIP of %s: lbd moves it with the instance through `services` and answers ARP/NDP for it (announce = \"arp\")", strings.Join(names, ", "))
		return
	}
	im.rep.differs(k, "a VIP of %s: the adverts carry it as keepalived's do, and lbd binds it on its own link with the service, carried by this instance (`services`), answering ARP/NDP for it (announce = \"arp\")", strings.Join(names, ", "))
}

// announce sets the moved services' announce interface.
func (im *importer) announce(v *inst) {
	for _, m := range v.moved {
		dev := m.dev
		if dev == "" {
			dev = v.iface
		}
		for _, name := range m.services {
			s := im.serviceNamed(name)
			switch {
			case s == nil || dev == "":
			case s.announceIf == "":
				s.announceIf = dev
			case s.announceIf != dev:
				im.rep.notMapped(m.node, "lbd announces a service's VIPs on one interface: %s is announced on %s", name, s.announceIf)
			}
		}
	}
}

func (im *importer) serviceNamed(name string) *svc {
	for _, s := range im.out {
		if s.Name == name {
			return s.svc
		}
	}
	return nil
}

// servicesOf names the imported services with VIP a.
func (im *importer) servicesOf(a netip.Addr) []string {
	a = a.Unmap()
	var out []string
	for _, s := range im.out {
		if slices.Contains(s.vips, a) {
			out = append(out, s.Name)
		}
	}
	return out
}
