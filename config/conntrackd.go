package config

import (
	"net/netip"
	"slices"
)

// Conntrackd is [ha.conntrackd]: conntrackd (Debian's package, FTFW mode),
// which lbd runs to replicate the NAT state of masqueraded connections to
// the peer. IPVS connection sync carries IPVS's own state only; a
// masqueraded connection also needs its conntrack entry (the address and
// port it was SNATed to) on the box that takes over, and that address
// must move with the pair: lbd then SNATs to the inside floating address
// (SNATAddresses) rather than masquerading to each box's own.
type Conntrackd struct {
	Enabled bool
	// Interface carries the replication; defaults to [ha.ipvs_sync]'s.
	Interface string
	// Peer is the other box's address on Interface (defaults to
	// [ha.ipvs_sync]'s peer): replication goes to it by unicast UDP, and
	// lbd's rules accept replication from it only.
	Peer netip.Addr
	// Address is this box's address on Interface; unset, lbd takes the
	// link's first address of Peer's family when it starts.
	Address netip.Addr
	Port    uint16
	// Program is conntrackd's path (/usr/sbin/conntrackd).
	Program string
	// SNATAddresses are the floating addresses masqueraded connections
	// leave from (at most one per family), each one of a [[vrrp]]
	// instance's addresses.
	SNATAddresses []netip.Addr
	Pos           Pos

	snatKeys []string // the key of each of SNATAddresses
	snatPos  []Pos
}

// Defaults of [ha.conntrackd].
const (
	DefaultConntrackdPort    = 3780
	DefaultConntrackdProgram = "/usr/sbin/conntrackd"
)

func decodeConntrackd(t *node, s *Conntrackd) {
	s.Enabled, s.Pos = true, t.pos("")
	s.Port, s.Program = DefaultConntrackdPort, DefaultConntrackdProgram
	if t.str("interface", &s.Interface) && !ifName.MatchString(s.Interface) {
		t.errorf("interface", "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", s.Interface)
	}
	if t.addr("peer", &s.Peer) && !isUnicast(s.Peer) {
		t.errorf("peer", "%s is not a unicast address; expected the other box's address on the replication link", s.Peer)
	}
	if t.addr("address", &s.Address) && !isUnicast(s.Address) {
		t.errorf("address", "%s is not a unicast address; expected this box's address on the replication link", s.Address)
	}
	var n int
	if t.integer("port", &n, 1, 65535) {
		s.Port = uint16(n)
	}
	if t.str("program", &s.Program) && !isAbs(s.Program) {
		t.errorf("program", "%q is not an absolute path; expected conntrackd's, such as %q", s.Program, DefaultConntrackdProgram)
	}
	s.SNATAddresses, s.snatKeys = t.addrs("snat_address")
	for _, k := range s.snatKeys {
		s.snatPos = append(s.snatPos, t.pos(k))
	}
	if len(s.SNATAddresses) == 0 {
		t.errorf("", "has no snat_address; expected snat_address = [\"198.51.100.1\"] (or similar): the inside floating address(es) masqueraded connections leave from, "+
			"so that the box taking over holds the address the real servers answer to")
	}
	t.finish()
}

func isAbs(p string) bool { return len(p) > 0 && p[0] == '/' }

// validateConntrackd checks [ha.conntrackd] against the pair: defaults
// from [ha.ipvs_sync], the SNAT addresses are floating addresses of
// [[vrrp]] instances, one per family.
func validateConntrackd(cfg *Config, sink *errorSink) {
	s := &cfg.Conntrackd
	if !s.Enabled {
		return
	}
	errAt := func(key, format string, args ...any) {
		sink.add(newError(s.Pos, "ha.conntrackd"+key, format, args...))
	}
	if s.Interface == "" {
		s.Interface = cfg.IPVSSync.Interface
	}
	if !s.Peer.IsValid() {
		s.Peer = cfg.IPVSSync.Peer
	}
	if s.Interface == "" || !s.Peer.IsValid() {
		errAt("", "has no interface and peer, and there is no [ha.ipvs_sync] to take them from; expected interface = \"eth1\" and peer = \"198.51.100.3\" (or similar)")
	}
	if s.Address.IsValid() && s.Peer.IsValid() && s.Address.Is4() != s.Peer.Is4() {
		errAt(".address", "%s is not of the peer's family (%s); expected this box's address on %s in the same family", s.Address, s.Peer, s.Interface)
	}
	if len(cfg.VRRP) == 0 {
		errAt("", "is set without [[vrrp]] instances; expected the failover pair whose masqueraded connections it replicates")
	}
	families := map[bool]bool{}
	for i, a := range s.SNATAddresses {
		key, pos := ".snat_address", s.Pos
		if i < len(s.snatKeys) {
			key, pos = "."+s.snatKeys[i], s.snatPos[i]
		}
		errAt := func(key, format string, args ...any) {
			sink.add(newError(pos, "ha.conntrackd"+key, format, args...))
		}
		if families[a.Is4()] {
			errAt(key, "%s is a second address of its family; expected at most one IPv4 and one IPv6 address", a)
		}
		families[a.Is4()] = true
		if _, ok := cfg.FloatingAddress(a); !ok && len(cfg.VRRP) > 0 {
			errAt(key, "%s is not an address of a [[vrrp]] instance; expected the inside floating address (one of an instance's addresses), which moves with the master", a)
		}
	}
}

// FloatingAddress returns the [[vrrp]] address (advertised or excluded)
// whose address is a.
func (c *Config) FloatingAddress(a netip.Addr) (VRRPAddress, bool) {
	for i := range c.VRRP {
		v := &c.VRRP[i]
		if i := slices.IndexFunc(slices.Concat(v.Addresses, v.ExcludedAddresses), func(f VRRPAddress) bool { return f.Prefix.Addr() == a }); i >= 0 {
			return slices.Concat(v.Addresses, v.ExcludedAddresses)[i], true
		}
	}
	return VRRPAddress{}, false
}

// Same reports whether c and o say the same, wherever they are written.
func (c *Conntrackd) Same(o *Conntrackd) bool {
	return c.Enabled == o.Enabled && c.Interface == o.Interface && c.Peer == o.Peer && c.Address == o.Address &&
		c.Port == o.Port && c.Program == o.Program && slices.Equal(c.SNATAddresses, o.SNATAddresses)
}
