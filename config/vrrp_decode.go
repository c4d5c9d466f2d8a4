package config

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// decodeVRRP decodes the main file's [[vrrp]] and [[vrrp_sync_group]]
// tables. Checks across them and the services happen in validateVRRP.
func decodeVRRP(root *node, c *Config) {
	for _, t := range root.tables("vrrp") {
		c.VRRP = append(c.VRRP, decodeVRRPInstance(t))
	}
	for _, t := range root.tables("vrrp_sync_group") {
		c.VRRPSyncGroups = append(c.VRRPSyncGroups, decodeVRRPSyncGroup(t))
	}
}

// decodeVRRPInstance decodes one [[vrrp]] table, in the order of the
// reference (the order of the accepted keys an unknown key's error lists).
func decodeVRRPInstance(n *node) VRRPInstance {
	v := VRRPInstance{
		Version:    defaultVRRPVersion,
		Priority:   defaultVRRPPriority,
		GARPRepeat: defaultGARPRepeat,
		GARPDelay:  defaultGARPDelay,
		TrackSyncs: defaultTrackSyncs,
		Pos:        n.pos(""),
		prov:       provenance{path: n.path},
	}
	versionOK := decodeVRRPIdentity(n, &v)
	decodeVRRPTimers(n, &v, versionOK)
	peerKeys := decodeVRRPPeers(n, &v)
	decodeVRRPAuth(n, &v, versionOK)
	v.Addresses, v.addressKeys = vrrpAddresses(n, "addresses", v.Interface)
	v.ExcludedAddresses, v.excludedKeys = vrrpAddresses(n, "excluded_addresses", v.Interface)
	decodeVRRPServices(n, &v)
	v.TrackInterfaces = interfaceNames(n, "track_interfaces")
	n.integer("track_syncs", &v.TrackSyncs, 0, 1000)
	v.TrackServices, v.trackServiceKeys = n.names("track_services", "service names")
	for _, k := range v.trackServiceKeys {
		v.prov.keep(n, k)
	}
	n.integer("garp_master_repeat", &v.GARPRepeat, 1, 100)
	n.duration("garp_master_delay", &v.GARPDelay, 0, time.Hour)
	decodeNotify(n, &v.Notify)
	checkVRRPFamilies(n, &v, versionOK, peerKeys)
	// An element refused where it is decoded counts: one error is enough.
	written := func(k string) bool { return n.has(k) && !isEmptyArray(n, k) }
	if !written("addresses") && !written("excluded_addresses") && !written("services") {
		n.errorf("", "instance %q moves nothing; expected addresses = [\"ADDR/LEN\"], excluded_addresses = [...] or services = [...]", v.Name)
	}
	for _, k := range slices.Concat([]string{"name", "interface", "virtual_router_id", "services"}, v.addressKeys, v.excludedKeys) {
		v.prov.keep(n, k)
	}
	n.finish()
	return v
}

// decodeVRRPIdentity decodes what identifies the virtual router: name,
// interface, VRID, version and priority. It reports whether the version
// is known, which the interval and authentication depend on.
func decodeVRRPIdentity(n *node, v *VRRPInstance) (versionOK bool) {
	if !n.str("name", &v.Name) {
		if !n.has("name") {
			n.errorf("", "VRRP instance has no name; expected name = \"...\" (keepalived's vrrp_instance NAME)")
		}
	} else if !vrrpName.MatchString(v.Name) {
		n.errorf("name", "%q is not a valid instance name; expected 1 to 64 letters, digits, '.', '_' or '-'", v.Name)
	}
	if !n.str("interface", &v.Interface) {
		if !n.has("interface") {
			n.errorf("", "VRRP instance %q has no interface; expected interface = \"eth0\" (or similar): adverts are sent and received there", v.Name)
		}
	} else if !ifName.MatchString(v.Interface) {
		n.errorf("interface", "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", v.Interface)
	}
	var id int
	if n.integer("virtual_router_id", &id, 1, 255) {
		v.VRID = uint8(id)
	} else if !n.has("virtual_router_id") {
		n.errorf("", "VRRP instance %q has no virtual_router_id; expected virtual_router_id = 1..255, the same on both boxes", v.Name)
	}
	versionOK = n.integer("version", &v.Version, 2, 3) || !n.has("version")
	if p, ok := n.t.Get("priority"); ok && p == int64(255) {
		n.get("priority")
		n.errorf("priority", "255 is the address owner's priority (keepalived's \"priority 255\"): lbd never owns the addresses it moves; expected 1 to 254")
	} else {
		var pr int
		if n.integer("priority", &pr, 1, 254) {
			v.Priority = uint8(pr)
		}
	}
	return versionOK
}

// decodeVRRPTimers decodes advert_interval, preempt and preempt_delay.
func decodeVRRPTimers(n *node, v *VRRPInstance, versionOK bool) {
	const key = "advert_interval"
	v.AdvertInterval = defaultAdvertV3
	if v.Version == 2 {
		v.AdvertInterval = defaultAdvertV2
	}
	var d time.Duration
	switch {
	case !versionOK:
		n.duration(key, &d, 0, 255*time.Second) // its type, at least
	case v.Version == 2:
		if n.duration(key, &d, 0, 255*time.Second) {
			if d < time.Second || d%time.Second != 0 {
				n.errorf(key, "%s is not a whole number of seconds from 1s to 255s, which VRRPv2 carries; expected whole seconds, or version = 3 for an interval from 10ms to 40.95s in centiseconds", d)
			} else {
				v.AdvertInterval = d
			}
		}
	default:
		if n.duration(key, &d, 10*time.Millisecond, maxAdvertV3) {
			if d%(10*time.Millisecond) != 0 {
				n.errorf(key, "%s is not a whole number of centiseconds, which VRRPv3 carries; expected a multiple of 10ms", d)
			} else {
				v.AdvertInterval = d
			}
		}
	}
	n.boolean("preempt", &v.Preempt)
	if n.duration("preempt_delay", &v.PreemptDelay, 0, 1000*time.Second) && !v.Preempt {
		n.errorf("preempt_delay", "has no effect without preempt = true (lbd does not preempt by default); expected it only together with preempt = true")
	}
}

// decodeVRRPPeers decodes unicast_peers and unicast_source, and returns
// the key of each peer; their family is checked against the addresses' in
// checkVRRPFamilies.
func decodeVRRPPeers(n *node, v *VRRPInstance) (keys []string) {
	v.UnicastPeers, keys = n.addrs("unicast_peers")
	if n.has("unicast_peers") && isEmptyArray(n, "unicast_peers") {
		n.errorf("unicast_peers", "is empty; expected the peers' addresses, or no unicast_peers for multicast adverts")
	}
	for i, p := range v.UnicastPeers {
		if bad := vrrpUnicast(p); bad != "" {
			n.errorf(keys[i], "%s is %s; expected the unicast address of a peer", p, bad)
		} else if j := slices.Index(v.UnicastPeers[:i], p); j >= 0 {
			n.errorf(keys[i], "%s is listed twice (also %s); expected each peer once", p, keys[j])
		}
	}
	if !n.addr("unicast_source", &v.UnicastSource) {
		return keys
	}
	switch {
	case !n.has("unicast_peers"):
		n.errorf("unicast_source", "is only used with unicast_peers; expected unicast_peers = [...] or no unicast_source")
	case vrrpUnicast(v.UnicastSource) != "":
		n.errorf("unicast_source", "%s is %s; expected an address of this box", v.UnicastSource, vrrpUnicast(v.UnicastSource))
	case slices.Contains(v.UnicastPeers, v.UnicastSource):
		n.errorf("unicast_source", "%s is also one of unicast_peers; expected this box's own address", v.UnicastSource)
	}
	return keys
}

// vrrpUnicast says what a can never be as a VRRP peer or address, or "".
func vrrpUnicast(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "unspecified"
	case a.IsLoopback():
		return "loopback"
	case a.IsMulticast():
		return "multicast"
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	}
	return ""
}

// decodeVRRPAuth decodes auth_type and auth_pass. The password is never
// repeated in an error.
func decodeVRRPAuth(n *node, v *VRRPInstance, versionOK bool) {
	var typ string
	if t, ok := n.t.Get("auth_type"); ok && isString(t) && strings.EqualFold(t.(string), "ah") {
		n.get("auth_type")
		n.errorf("auth_type", "IPsec AH authentication is not supported (keepalived deprecated it); expected auth_type = \"pass\" or none")
	} else if n.oneOf("auth_type", &typ, "pass") && versionOK && v.Version == 3 {
		n.errorf("auth_type", "VRRPv3 has no authentication (RFC 5798 removed it); expected no auth_type, or version = 2 to pair with a keepalived that authenticates")
	}
	var pass string
	if !n.str("auth_pass", &pass) {
		if typ == "pass" && !n.has("auth_pass") {
			n.errorf("auth_type", "\"pass\" needs a password; expected auth_pass = \"...\" (1 to 8 bytes)")
		}
		return
	}
	switch {
	case !n.has("auth_type"):
		n.errorf("auth_pass", "is only used with auth_type = \"pass\"; expected auth_type = \"pass\" or no auth_pass")
	case pass == "":
		n.errorf("auth_pass", "is empty; expected 1 to 8 bytes")
	case len(pass) > maxAuthPass:
		n.errorf("auth_pass", "is %d bytes long; VRRPv2 carries 8 (keepalived silently uses the first 8 of a longer one): expected 1 to 8 bytes", len(pass))
	default:
		v.AuthPass = Password(pass)
	}
}

// vrrpAddresses decodes a list of "ADDR[/LEN] [dev IFNAME]" (keepalived's
// syntax), each on dev (the instance's interface) unless it names one, and
// returns the key of each.
func vrrpAddresses(n *node, key, dev string) (out []VRRPAddress, keys []string) {
	n.list(key, "addresses such as \"198.18.2.10/24\" or \"198.18.3.1/24 dev eth1\"", func(k string, v any) {
		s, ok := v.(string)
		if !ok {
			n.wrongType(k, v, "a string such as \"198.18.2.10/24\" or \"198.18.3.1/24 dev eth1\"")
			return
		}
		a, msg := parseVRRPAddress(s, dev)
		if msg != "" {
			n.errorf(k, "%q %s", s, whole(msg))
			return
		}
		if j := slices.IndexFunc(out, func(o VRRPAddress) bool { return o.Prefix.Addr() == a.Prefix.Addr() }); j >= 0 {
			n.errorf(k, "%s is listed twice (also %s); expected each address once", a.Prefix.Addr(), keys[j])
			return
		}
		out = append(out, a)
		keys = append(keys, k)
	})
	return out, keys
}

// parseVRRPAddress parses "ADDR[/LEN] [dev IFNAME]", or says what is wrong
// with it.
func parseVRRPAddress(s, dev string) (VRRPAddress, string) {
	const want = "expected \"ADDR[/LEN] [dev IFNAME]\", such as \"198.18.2.10/24\" or \"2001:2:0:2::10/64 dev eth1\""
	f := strings.Fields(s)
	switch {
	case len(f) == 3 && f[1] == "dev" && ifName.MatchString(f[2]):
		dev = f[2]
	case len(f) == 3 && f[1] == "dev":
		return VRRPAddress{}, "names an invalid interface; expected 1 to 15 letters, digits, '.', '_' or '-' after dev"
	case len(f) != 1:
		return VRRPAddress{}, "is not an address; " + want + " (of keepalived's options, lbd takes dev only)"
	}
	var p netip.Prefix
	var err error
	if strings.Contains(f[0], "/") {
		p, err = netip.ParsePrefix(f[0])
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(f[0]); err == nil && a.Zone() == "" {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	switch {
	case err != nil || !p.IsValid():
		return VRRPAddress{}, "is not an address; " + want
	case p.Addr().Is4In6():
		return VRRPAddress{}, "is an IPv4-mapped IPv6 address; expected the IPv4 address itself"
	case vrrpUnicast(p.Addr()) != "":
		return VRRPAddress{}, "is " + vrrpUnicast(p.Addr()) + "; expected a unicast address"
	}
	return VRRPAddress{Prefix: p, Interface: dev}, ""
}

// decodeVRRPServices decodes services: names, or ["*"] for every service.
// That the names exist is checked in validateVRRP.
func decodeVRRPServices(n *node, v *VRRPInstance) {
	var names []string
	n.list("services", "service names, or [\"*\"] for every service", func(k string, x any) {
		s, ok := x.(string)
		switch {
		case !ok:
			n.wrongType(k, x, "a service name")
		case s == "*" && len(v.serviceKeys) == 0 && !v.AllServices:
			v.AllServices = true
		case s == "*" || v.AllServices:
			n.errorf(k, "\"*\" means every service; expected services = [\"*\"] alone, or service names without \"*\"")
		case slices.Contains(names, s):
			n.errorf(k, "%q is listed twice (also %s); expected each service once", s, v.serviceKeys[slices.Index(names, s)])
		default:
			names = append(names, strings.Clone(s))
			v.serviceKeys = append(v.serviceKeys, k)
			v.prov.keep(n, k)
		}
	})
	v.Services = names
}

// interfaceNames decodes a list of interface names, each once.
func interfaceNames(n *node, key string) []string {
	out, keys := n.names(key, "interface names")
	var ok []string
	for i, s := range out {
		if !ifName.MatchString(s) {
			n.errorf(keys[i], "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", s)
		} else if j := slices.Index(ok, s); j >= 0 {
			n.errorf(keys[i], "%q is listed twice; expected each interface once", s)
		} else {
			ok = append(ok, s)
		}
	}
	return ok
}

// names decodes an array of strings, and returns the key of each.
func (n *node) names(key, want string) (out, keys []string) {
	n.list(key, want, func(k string, v any) {
		if s, ok := v.(string); ok {
			out = append(out, strings.Clone(s))
			keys = append(keys, k)
		} else {
			n.wrongType(k, v, "a string")
		}
	})
	return out, keys
}

// decodeNotify decodes the notify programs of an instance or sync group.
func decodeNotify(n *node, dst *Notify) {
	for _, f := range dst.notifyKeys() {
		if n.str(f.key, f.dst) && !filepath.IsAbs(*f.dst) {
			n.errorf(f.key, "%q is not an absolute path; expected the program to run, such as \"/etc/lbd/notify.sh\" (no shell, no arguments)", *f.dst)
			*f.dst = ""
		}
		n.keepPos(f.key)
	}
}

// checkVRRPFamilies checks the families of an instance's addresses and
// peers: one family per instance (keepalived mixes them only in excluded
// addresses), and IPv4 only with version 2.
func checkVRRPFamilies(n *node, v *VRRPInstance, versionOK bool, peerKeys []string) {
	fam := v.Family()
	v2 := versionOK && v.Version == 2
	for i, a := range v.Addresses {
		switch f := family(a.Prefix.Addr()); {
		case v2 && f == 6:
			n.errorf(v.addressKeys[i], "%s is IPv6, and VRRPv2 is IPv4 only; expected version = 3 (or the address in excluded_addresses, which adverts do not carry)", a.Prefix.Addr())
		case f != fam:
			n.errorf(v.addressKeys[i], "%s is IPv%d but the first address is IPv%d; an instance advertises one family: expected another instance for IPv%d (or the address in excluded_addresses)", a.Prefix.Addr(), f, fam, f)
		}
	}
	for i, p := range v.UnicastPeers {
		switch f := family(p); {
		case v2 && f == 6 && len(v.Addresses) == 0 && i == 0:
			n.errorf(peerKeys[i], "%s is IPv6, and VRRPv2 is IPv4 only; expected version = 3 for IPv6 adverts", p)
		case f != fam:
			n.errorf(peerKeys[i], "%s is IPv%d but the instance advertises IPv%d; expected a peer of the instance's family", p, f, fam)
		}
	}
	if s := v.UnicastSource; s.IsValid() && family(s) != fam {
		n.errorf("unicast_source", "%s is IPv%d but the instance advertises IPv%d; expected an address of the instance's family", s, family(s), fam)
	}
	if s := v.UnicastSource; s.IsValid() && slices.ContainsFunc(slices.Concat(v.Addresses, v.ExcludedAddresses), func(a VRRPAddress) bool { return a.Prefix.Addr() == s }) {
		n.errorf("unicast_source", "%s is one of the instance's own addresses, which move; expected an address that stays on this box", s)
	}
}

// decodeVRRPSyncGroup decodes one [[vrrp_sync_group]] table; that its
// instances exist is checked in validateVRRP.
func decodeVRRPSyncGroup(n *node) VRRPSyncGroup {
	g := VRRPSyncGroup{Pos: n.pos(""), prov: provenance{path: n.path}}
	if !n.str("name", &g.Name) {
		if !n.has("name") {
			n.errorf("", "sync group has no name; expected name = \"...\" (keepalived's vrrp_sync_group NAME)")
		}
	} else if !vrrpName.MatchString(g.Name) {
		n.errorf("name", "%q is not a valid sync group name; expected 1 to 64 letters, digits, '.', '_' or '-'", g.Name)
	}
	g.prov.keep(n, "name")
	names, keys := n.names("instances", "instance names")
	for i, s := range names {
		if j := slices.Index(g.Instances, s); j >= 0 {
			n.errorf(keys[i], "%q is listed twice (also %s); expected each instance once", s, g.instanceKeys[j])
			continue
		}
		g.Instances = append(g.Instances, s)
		g.instanceKeys = append(g.instanceKeys, keys[i])
		g.prov.keep(n, keys[i])
	}
	if n.has("instances") && len(g.Instances) < 2 {
		n.errorf("instances", "lists %d instance(s); a sync group keeps two or more instances in one state: expected at least two", len(g.Instances))
	} else if !n.has("instances") {
		n.errorf("", "sync group %q has no instances; expected instances = [\"A\", \"B\"] (keepalived's group { A B })", g.Name)
	}
	decodeNotify(n, &g.Notify)
	n.finish()
	return g
}
