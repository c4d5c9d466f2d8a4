package desired

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/config"
)

// SetType is an ipset type.
type SetType string

const (
	HashIP       SetType = "hash:ip"
	HashNet      SetType = "hash:net"
	HashIPPort   SetType = "hash:ip,port"
	HashIPPortIP SetType = "hash:ip,port,ip"
	HashIPPortNT SetType = "hash:ip,port,net"
)

// SetSpec describes one of lbd's ipsets. The sets are fixed: services add
// entries, never sets or rules, so the rule count does not grow with them.
type SetSpec struct {
	Name    string
	Type    SetType
	Family  int // 4 or 6
	Comment string
}

// Set roles; the name of a role's set is SetName(role, family).
const (
	SetServices  = "SERVICES"   // VIP,proto:port and node-address,proto:port lbd serves
	SetVIPs      = "VIPS"       // VIP addresses: new connections to unserved ports are rejected
	SetMasqAll   = "MASQ-ALL"   // services with snat = "always"
	SetMasqAuto  = "MASQ-AUTO"  // services with snat = "auto"
	SetLocalNets = "LOCAL-NETS" // sources needing no SNAT with snat = "auto"
	SetRSNets    = "RS-NETS"    // real servers' networks: always masqueraded
	SetLoopback  = "LOOPBACK"   // rs,proto:port,rs: a real server reaching itself via the VIP
	SetNodePorts = "NODE-PORTS" // node-address,proto:port of NodePort-like services
	SetFirewall  = "FW"         // services with source_ranges
	SetSrcRanges = "SRC-RANGES" // vip,proto:port,cidr allowed to a firewalled service
	SetSrcIPs    = "SRC-IPS"    // vip,proto:port,own-address: the director may reach it
)

// SetName returns the name of the role's set for a family: LBD-X for IPv4,
// LBD6-X for IPv6 (ipset names are at most 31 characters).
func SetName(role string, family int) string {
	if family == 6 {
		return "LBD6-" + role
	}
	return "LBD-" + role
}

// SetSpecs returns every set lbd owns.
func SetSpecs() []SetSpec {
	roles := []struct {
		role    string
		typ     SetType
		comment string
	}{
		{SetServices, HashIPPort, "VIP and node-address ports lbd serves"},
		{SetVIPs, HashIP, "lbd VIPs"},
		{SetMasqAll, HashIPPort, "services with snat always"},
		{SetMasqAuto, HashIPPort, "services with snat auto"},
		{SetLocalNets, HashNet, "local networks (no SNAT with snat auto)"},
		{SetRSNets, HashNet, "real server networks (always SNAT)"},
		{SetLoopback, HashIPPortIP, "hairpin: real server to itself via its VIP"},
		{SetNodePorts, HashIPPort, "NodePort-like node-address ports"},
		{SetFirewall, HashIPPort, "services with source ranges"},
		{SetSrcRanges, HashIPPortNT, "source ranges allowed per service"},
		{SetSrcIPs, HashIPPortIP, "director addresses allowed to firewalled services"},
	}
	var out []SetSpec
	for _, fam := range []int{4, 6} {
		for _, r := range roles {
			out = append(out, SetSpec{Name: SetName(r.role, fam), Type: r.typ, Family: fam, Comment: r.comment})
		}
	}
	return out
}

// SetEntry is one ipset member. Which fields are set depends on the set's
// type: IP; Net; IP,Proto:Port; IP,Proto:Port,IP2; IP,Proto:Port,Net.
type SetEntry struct {
	IP    netip.Addr
	Proto config.Protocol
	Port  uint16
	IP2   netip.Addr
	Net   netip.Prefix
}

// String renders the entry as the ipset command line does.
func (e SetEntry) String() string {
	var parts []string
	switch {
	case e.IP.IsValid():
		parts = append(parts, e.IP.String())
	case e.Net.IsValid():
		return e.Net.String()
	}
	if e.Port != 0 {
		parts = append(parts, fmt.Sprintf("%s:%d", e.Proto, e.Port))
	}
	switch {
	case e.IP2.IsValid():
		parts = append(parts, e.IP2.String())
	case e.Net.IsValid():
		parts = append(parts, e.Net.String())
	}
	return strings.Join(parts, ",")
}

// Compare orders entries field by field (not by their text: sets hold
// hundreds of thousands of entries and are sorted on every sync).
func (e SetEntry) Compare(o SetEntry) int {
	return cmp.Or(
		e.IP.Compare(o.IP),
		cmp.Compare(e.Proto, o.Proto),
		cmp.Compare(e.Port, o.Port),
		e.IP2.Compare(o.IP2),
		e.Net.Addr().Compare(o.Net.Addr()),
		cmp.Compare(e.Net.Bits(), o.Net.Bits()),
	)
}

// sets collects entries per set name, without duplicates. hint sizes a
// set's map when it is made: growing maps of 100,000 entries by rehashing
// was most of what a sync allocated at 10,000 services.
type sets struct {
	m     map[string]map[SetEntry]struct{}
	hint  map[string]int
	names map[string]*[2]string // role -> IPv4 and IPv6 set names, made once
}

func newSets() sets {
	return sets{m: map[string]map[SetEntry]struct{}{}, hint: map[string]int{}, names: map[string]*[2]string{}}
}

// name is SetName without a string concatenation per entry.
func (s sets) name(role string, fam int) string {
	n := s.names[role]
	if n == nil {
		n = &[2]string{SetName(role, 4), SetName(role, 6)}
		s.names[role] = n
	}
	if fam == 6 {
		return n[1]
	}
	return n[0]
}

// expect adds n to the expected size of a role's set in family fam.
func (s sets) expect(role string, fam, n int) { s.hint[s.name(role, fam)] += n }

func (s sets) add(role string, e SetEntry) {
	fam := 4
	switch {
	case e.IP.IsValid() && e.IP.Is6(), !e.IP.IsValid() && e.Net.Addr().Is6():
		fam = 6
	}
	name := s.name(role, fam)
	set := s.m[name]
	if set == nil {
		set = make(map[SetEntry]struct{}, s.hint[name])
		s.m[name] = set
	}
	set[e] = struct{}{}
}

// list returns every set's entries, in no particular order: appliers
// compare them as sets, and sorting hundreds of thousands of entries on
// every sync is wasted (lbd plan sorts what it prints).
func (s sets) list() map[string][]SetEntry {
	out := make(map[string][]SetEntry, len(SetSpecs()))
	for _, spec := range SetSpecs() {
		out[spec.Name] = nil
	}
	for name, m := range s.m {
		out[name] = slices.AppendSeq(make([]SetEntry, 0, len(m)), maps.Keys(m))
	}
	return out
}

// filterSets computes every set's entries for the virtual servers st
// already holds.
func filterSets(cfg *config.Config, services []config.Service, st *State, hostAddrs []netip.Addr) map[string][]SetEntry {
	s := newSets()
	for _, vs := range st.Services {
		fam := family(vs.Key.Addr)
		s.expect(SetServices, fam, 1)
		s.expect(SetVIPs, fam, 1)
		s.expect(SetMasqAuto, fam, 1)
		s.expect(SetLoopback, fam, len(vs.Dests))
		if len(cfg.Dataplane.RealServerNetworks) == 0 {
			s.expect(SetRSNets, fam, len(vs.Dests))
		}
	}
	for _, p := range cfg.Dataplane.LocalNetworks {
		s.add(SetLocalNets, SetEntry{Net: p})
	}
	for _, p := range cfg.Dataplane.RealServerNetworks {
		s.add(SetRSNets, SetEntry{Net: p})
	}
	byName := map[string]*config.Service{}
	for i := range services {
		byName[services[i].Name] = &services[i]
	}
	isVIP := map[netip.Addr]bool{}
	for _, v := range st.VIPs {
		isVIP[v] = true
		s.add(SetVIPs, SetEntry{IP: v})
	}
	for _, vs := range st.Services {
		svc := byName[vs.Name]
		k := vs.Key
		e := SetEntry{IP: k.Addr, Proto: k.Protocol, Port: k.Port}
		s.add(SetServices, e)
		if !isVIP[k.Addr] {
			s.add(SetNodePorts, e)
		}
		switch svc.SNAT {
		case config.SNATAlways:
			s.add(SetMasqAll, e)
		case config.SNATAuto:
			s.add(SetMasqAuto, e)
		}
		for _, d := range vs.Dests {
			s.add(SetLoopback, SetEntry{IP: d.Addr.Addr(), Proto: k.Protocol, Port: d.Addr.Port(), IP2: d.Addr.Addr()})
			if len(cfg.Dataplane.RealServerNetworks) == 0 {
				s.add(SetRSNets, SetEntry{Net: netip.PrefixFrom(d.Addr.Addr(), d.Addr.Addr().BitLen())})
			}
		}
		if len(svc.SourceRanges) == 0 {
			continue
		}
		s.add(SetFirewall, e)
		for _, p := range svc.SourceRanges {
			s.add(SetSrcRanges, SetEntry{IP: k.Addr, Proto: k.Protocol, Port: k.Port, Net: p})
		}
		// The director itself may always reach the service.
		for _, a := range hostAddrs {
			if a.Is4() == k.Addr.Is4() {
				s.add(SetSrcIPs, SetEntry{IP: k.Addr, Proto: k.Protocol, Port: k.Port, IP2: a})
			}
		}
	}
	return s.list()
}

// nodeAddrs returns the box's addresses that serve NodePort-like services:
// inside node_cidrs, never loopback, link-local or one of lbd's VIPs.
func nodeAddrs(cfg *config.Config, hostAddrs []netip.Addr, vips map[netip.Addr]bool) []netip.Addr {
	var out []netip.Addr
	for _, a := range hostAddrs {
		if a.IsLoopback() || a.IsLinkLocalUnicast() || vips[a] {
			continue
		}
		if slices.ContainsFunc(cfg.Dataplane.NodeCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
