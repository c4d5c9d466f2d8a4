package desired

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// Marked is what lbd marks for a firewall-mark virtual server: each of
// VIPs on each of Ports (of Protocol). Its slices are the configuration's:
// never modified.
type Marked struct {
	VIPs     []netip.Addr
	Protocol lvs.Protocol
	Ports    []config.PortRange
}

func (m *Marked) equal(o *Marked) bool {
	if m == nil || o == nil {
		return m == o
	}
	return m.Protocol == o.Protocol && slices.Equal(m.VIPs, o.VIPs) && slices.Equal(m.Ports, o.Ports)
}

// markKey is the key of a firewall-mark service's one virtual server.
func markKey(s *config.Service) lvs.Key {
	f := lvs.IPv4
	if s.Family() == 6 {
		f = lvs.IPv6
	}
	return lvs.FWMarkKey(s.FWMark, f)
}

// markServer is a firewall-mark service's virtual server.
func markServer(s *config.Service, dests []Dest, healthy int) Service {
	k := markKey(s)
	v := virtualServer(s, k.Addr, 0, dests)
	v.Key, v.Healthy = k, healthy
	if len(s.MarkPorts) > 0 {
		v.Marked = &Marked{VIPs: s.VIPs, Protocol: s.Protocol, Ports: s.MarkPorts}
	}
	return v
}

// appendMarkMembers appends the set members of firewall-mark virtual
// server vs. Each VIP:port lbd marks is served (LBD-SERVICES: accepted,
// and its VIP's other ports rejected) and marked (LBD-FWMARK), never in
// the sets that lead to LBD-MARK-MASQ before IPVS: IPVS matches the whole
// mark, so the masquerade bit would make the packet miss the service.
// Its masquerading is decided after IPVS, by the rules of fwmarkRules.
func (st *State) appendMarkMembers(buf []Member, vs *Service) []Member {
	direct := vs.Method != lvs.NAT
	if m := vs.Marked; m != nil {
		for _, vip := range m.VIPs {
			buf = append(buf, member(roleVIPs, SetEntry{IP: vip}))
			for _, r := range m.Ports {
				for p := int(r.First); p <= int(r.Last); p++ {
					e := SetEntry{IP: vip, Proto: m.Protocol, Port: uint16(p)}
					marked := e
					marked.Mark = vs.Key.FWMark
					buf = append(buf, member(roleServices, e), member(roleFWMark, marked))
					if direct {
						buf = append(buf, member(roleNoTrack, e))
					}
					buf = st.appendFirewall(buf, e, vs.SourceRanges)
				}
			}
		}
	}
	// The real servers' own packets to the service are masqueraded after
	// IPVS (the LBD-RS-NETS rule of fwmarkRules), which also covers a
	// real server reaching itself (hairpin).
	if len(st.sets.rsNets) == 0 {
		for _, d := range vs.Dests {
			a := d.Addr.Addr()
			buf = append(buf, member(roleRSNets, SetEntry{Net: netip.PrefixFrom(a, a.BitLen())}))
		}
	}
	return buf
}

// fwmarkTables adds to ts (Tables' nat, filter and raw) the firewall-mark
// services' rules: the mangle table, whose one rule gives the packets to
// each VIP:port in LBD-FWMARK that entry's mark (a fixed rule: services
// add entries), and in nat LBD-POSTROUTING the masquerading of each NAT
// firewall-mark service of the family, decided after IPVS. These rules
// are the one place lbd's rules grow with services: one or two per
// firewall-mark service, which are few. They match the packet's mark
// (IPVS leaves it as the service matched it) on packets IPVS forwarded
// by NAT, in the original direction.
func fwmarkTables(cfg *config.Config, family int, ts []Table) []Table {
	dp := cfg.Dataplane
	set := func(role string) string { return SetName(role, family) }
	mangle := Table{
		Name:   "mangle",
		Chains: []string{"LBD-FWMARK"},
		Rules:  []string{"-A LBD-FWMARK -j SET --map-set " + set(SetFWMark) + " dst,dst --map-mark"},
		Jumps: []Jump{
			{From: "PREROUTING", To: "LBD-FWMARK"},
			{From: "OUTPUT", To: "LBD-FWMARK"},
		},
	}
	var masq []string
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.FWMark == 0 || s.Family() != family || s.Forward.Method != lvs.NAT {
			continue
		}
		match := fmt.Sprintf("-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark %#x", s.FWMark)
		switch s.SNAT {
		case config.SNATAlways:
			masq = append(masq, match+" -j LBD-MARK-MASQ")
			continue
		case config.SNATAuto:
			masq = append(masq, match+" -m set ! --match-set "+set(SetLocalNets)+" src -j LBD-MARK-MASQ")
		}
		// Every mode: the real servers' networks, as LBD-SERVICES does
		// for VIP:port services (and the hairpin with them).
		masq = append(masq, match+" -m set --match-set "+set(SetRSNets)+" src -j LBD-MARK-MASQ")
	}
	for i := range ts {
		if ts[i].Name != "nat" || len(masq) == 0 {
			continue
		}
		// Ahead of the rule that lets unmarked packets go unmasqueraded.
		mark := dp.MasqueradeMark()
		at := slices.Index(ts[i].Rules, fmt.Sprintf("-A LBD-POSTROUTING -m mark ! --mark %#x/%#x -j RETURN", mark, mark))
		if at < 0 {
			at = len(ts[i].Rules)
		}
		ts[i].Rules = slices.Insert(slices.Clip(ts[i].Rules), at, masq...)
	}
	return append(ts, mangle)
}
