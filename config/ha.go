package config

import "net/netip"

// IPVSSync is [ha.ipvs_sync] (keepalived's lvs_sync_daemon): the kernel's
// IPVS connection-sync daemons, which lbd runs in both roles at once on
// each box of a failover pair, so that the box that takes over knows the
// connections the other was forwarding.
type IPVSSync struct {
	Enabled bool
	// Interface carries the sync multicast between the boxes.
	Interface string
	SyncID    uint8
	// Peer is the other box's address on Interface: the only sender lbd's
	// rules accept sync packets from (the protocol is unauthenticated).
	Peer netip.Addr
	// Group, Port, TTL and MaxPacketLength are the kernel's settings;
	// zero values are its defaults (224.0.0.81, 8848, 1, from the MTU).
	Group           netip.Addr
	Port            uint16
	TTL             uint8
	MaxPacketLength uint16
	Pos             Pos
}

// SyncGroup is the multicast group the sync daemons use.
func (s IPVSSync) SyncGroup() netip.Addr {
	if s.Group.IsValid() {
		return s.Group
	}
	return netip.AddrFrom4([4]byte{224, 0, 0, 81})
}

// SyncPort is the UDP port the sync daemons use.
func (s IPVSSync) SyncPort() uint16 {
	if s.Port != 0 {
		return s.Port
	}
	return 8848
}

// decodeHA decodes the [ha] table of the main file.
func decodeHA(root *node, c *Config) {
	t := root.table("ha")
	if t == nil {
		return
	}
	if s := t.table("ipvs_sync"); s != nil {
		decodeIPVSSync(s, &c.IPVSSync)
	}
	if s := t.table("conntrackd"); s != nil {
		decodeConntrackd(s, &c.Conntrackd)
	}
	t.finish()
}

func decodeIPVSSync(t *node, s *IPVSSync) {
	s.Enabled, s.Pos = true, t.pos("")
	if !t.str("interface", &s.Interface) {
		t.errorf("", "has no interface; expected interface = \"eth1\" (or similar): the link both boxes share, which must carry multicast")
	} else if !ifName.MatchString(s.Interface) {
		t.errorf("interface", "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", s.Interface)
	}
	var n int
	if t.integer("sync_id", &n, 0, 255) {
		s.SyncID = uint8(n)
	}
	if !t.addr("peer", &s.Peer) && !t.has("peer") {
		t.errorf("", "has no peer; expected peer = \"198.51.100.3\" (or similar): the other box's address on the sync link, the only sender of sync packets lbd accepts (they are not authenticated)")
	} else if s.Peer.IsValid() && !isUnicast(s.Peer) {
		t.errorf("peer", "%s is not a unicast address; expected the other box's address on %s", s.Peer, s.Interface)
	}
	if t.addr("group", &s.Group) && !s.Group.IsMulticast() {
		// The kernel refuses unicast: sync is multicast only.
		t.errorf("group", "%s is not a multicast address; expected one such as \"224.0.0.81\" (the kernel sends connection sync to a multicast group only)", s.Group)
	}
	if s.Group.IsValid() && s.Peer.IsValid() && s.Group.Is4() != s.Peer.Is4() {
		t.errorf("peer", "%s is not of the group's family (%s); expected an address of the same family", s.Peer, s.Group)
	}
	if t.integer("port", &n, 1, 65535) {
		s.Port = uint16(n)
	}
	if t.integer("ttl", &n, 1, 255) {
		s.TTL = uint8(n)
	}
	if t.integer("max_packet_length", &n, 1024, 65507) {
		s.MaxPacketLength = uint16(n)
	}
	t.finish()
}

func isUnicast(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() && !(a.Is4() && a == netip.AddrFrom4([4]byte{255, 255, 255, 255}))
}

// validateHA checks [ha] against the rest: the sync link is not lbd's
// dummy link, and the peer is not one of the VIPs.
func validateHA(cfg *Config, sink *errorSink, globalsOK bool) {
	validateConntrackd(cfg, sink)
	s := cfg.IPVSSync
	if !s.Enabled {
		return
	}
	if globalsOK && s.Interface == cfg.Dataplane.Interface {
		sink.add(newError(s.Pos, "ha.ipvs_sync.interface", "%q is lbd's dummy link, which carries VIPs only; expected the link both boxes share", s.Interface))
	}
	for i := range cfg.Services {
		if isVIPOf(&cfg.Services[i], s.Peer) {
			sink.add(newError(s.Pos, "ha.ipvs_sync.peer", "%s is a VIP of service %s; expected the other box's own address", s.Peer, cfg.Services[i].Name))
		}
	}
}
