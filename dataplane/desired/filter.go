package desired

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
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
	// SkbInfo gives each entry a firewall mark (ipset's skbinfo
	// extension, SetEntry.Mark) that `-j SET --map-set ... --map-mark`
	// puts on the packets the entry matches.
	SkbInfo bool
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
	SetNoTrack   = "NOTRACK"    // VIP,proto:port of DR and tunnel services: conntrack skips them
	SetFWMark    = "FWMARK"     // VIP,proto:port skbmark N: lbd marks the packets of firewall-mark services
)

// SetName returns the name of the role's set for a family: LBD-X for IPv4,
// LBD6-X for IPv6 (ipset names are at most 31 characters).
func SetName(role string, family int) string {
	if family == 6 {
		return "LBD6-" + role
	}
	return "LBD-" + role
}

// role is a set's job; each role has one set per family.
type role uint8

const (
	roleServices role = iota
	roleVIPs
	roleMasqAll
	roleMasqAuto
	roleLocalNets
	roleRSNets
	roleLoopback
	roleNodePorts
	roleFirewall
	roleSrcRanges
	roleSrcIPs
	roleNoTrack
	roleFWMark
	numRoles
)

// roles describes each role's set, in the order SetSpecs lists them.
var roles = [numRoles]struct {
	name    string
	typ     SetType
	comment string
	skbinfo bool
}{
	{SetServices, HashIPPort, "VIP and node-address ports lbd serves", false},
	{SetVIPs, HashIP, "lbd VIPs", false},
	{SetMasqAll, HashIPPort, "services with snat always", false},
	{SetMasqAuto, HashIPPort, "services with snat auto", false},
	{SetLocalNets, HashNet, "local networks (no SNAT with snat auto)", false},
	{SetRSNets, HashNet, "real server networks (always SNAT)", false},
	{SetLoopback, HashIPPortIP, "hairpin: real server to itself via its VIP", false},
	{SetNodePorts, HashIPPort, "NodePort-like node-address ports", false},
	{SetFirewall, HashIPPort, "services with source ranges", false},
	{SetSrcRanges, HashIPPortNT, "source ranges allowed per service", false},
	{SetSrcIPs, HashIPPortIP, "director addresses allowed to firewalled services", false},
	{SetNoTrack, HashIPPort, "DR and tunnel VIP ports (not tracked)", false},
	{SetFWMark, HashIPPort, "VIP ports marked for firewall-mark services", true},
}

// SetID numbers lbd's sets: the IPv4 sets first, then the IPv6 ones, in
// SetSpecs' order. Members carry it instead of the set's name.
type SetID uint8

// NumSets is the number of sets lbd owns.
const NumSets = 2 * SetID(numRoles)

func setID(r role, fam int) SetID {
	if fam == 6 {
		return SetID(numRoles) + SetID(r)
	}
	return SetID(r)
}

// Spec describes the set.
func (id SetID) Spec() SetSpec {
	r, fam := role(id%SetID(numRoles)), 4
	if id >= SetID(numRoles) {
		fam = 6
	}
	return SetSpec{Name: SetName(roles[r].name, fam), Type: roles[r].typ, Family: fam, Comment: roles[r].comment, SkbInfo: roles[r].skbinfo}
}

// SetSpecs returns every set lbd owns, indexed by SetID.
func SetSpecs() []SetSpec {
	out := make([]SetSpec, NumSets)
	for id := range NumSets {
		out[id] = id.Spec()
	}
	return out
}

// SetEntry is one ipset member. Which fields are set depends on the set's
// type: IP; Net; IP,Proto:Port; IP,Proto:Port,IP2; IP,Proto:Port,Net.
type SetEntry struct {
	IP    netip.Addr
	Proto lvs.Protocol
	Port  uint16
	// Mark is the firewall mark an entry of a SkbInfo set gives the
	// packets it matches (ipset's skbmark, with a full mask); 0 in other
	// sets.
	Mark uint32
	IP2  netip.Addr
	Net  netip.Prefix
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
	if e.Mark != 0 {
		return fmt.Sprintf("%s skbmark %#x", strings.Join(parts, ","), e.Mark)
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
		cmp.Compare(e.Mark, o.Mark),
		e.IP2.Compare(o.IP2),
		e.Net.Addr().Compare(o.Net.Addr()),
		cmp.Compare(e.Net.Bits(), o.Net.Bits()),
	)
}

// Member is one entry of one of lbd's sets.
type Member struct {
	Set   SetID
	Entry SetEntry
}

// setInputs is what set members derive from besides the virtual servers.
type setInputs struct {
	hostAddrs []netip.Addr
	localNets []netip.Prefix
	rsNets    []netip.Prefix // configured real_server_networks; none: one /32 (/128) per real server
}

func (a setInputs) equal(b setInputs) bool {
	return slices.Equal(a.hostAddrs, b.hostAddrs) && slices.Equal(a.localNets, b.localNets) && slices.Equal(a.rsNets, b.rsNets)
}

// SameSetInputs reports whether st and o give every virtual server the
// same set members (the inputs besides the virtual servers are equal).
func (st *State) SameSetInputs(o *State) bool { return st.sets.equal(o.sets) }

// entryFamily is the family of the set an entry belongs in.
func entryFamily(e SetEntry) int {
	if e.IP.IsValid() && e.IP.Is6() || !e.IP.IsValid() && e.Net.Addr().Is6() {
		return 6
	}
	return 4
}

func member(r role, e SetEntry) Member { return Member{Set: setID(r, entryFamily(e)), Entry: e} }

// AppendGlobalMembers appends the members that belong to no virtual
// server: the configured local and real server networks.
func (st *State) AppendGlobalMembers(buf []Member) []Member {
	for _, p := range st.sets.localNets {
		buf = append(buf, member(roleLocalNets, SetEntry{Net: p}))
	}
	for _, p := range st.sets.rsNets {
		buf = append(buf, member(roleRSNets, SetEntry{Net: p}))
	}
	return buf
}

// AppendMembers appends the set members virtual server vs needs (several
// virtual servers may need the same one). They are derived on demand, not
// stored: at 10,000 services they are ~200,000 entries.
func (st *State) AppendMembers(buf []Member, vs *Service) []Member {
	k := vs.Key
	if k.IsFWMark() {
		return st.appendMarkMembers(buf, vs)
	}
	e := SetEntry{IP: k.Addr, Proto: k.Protocol, Port: k.Port}
	buf = append(buf, member(roleServices, e))
	if vs.NodePort {
		buf = append(buf, member(roleNodePorts, e))
	} else {
		buf = append(buf, member(roleVIPs, SetEntry{IP: k.Addr}))
	}
	// DR and tunnel replies go from the real server to the client: the
	// director sees one direction only, which conntrack would hold as
	// INVALID (and its table fill up), and there is nothing to masquerade
	// nor a hairpin through the director (the real server holds the VIP).
	direct := vs.Method != lvs.NAT
	switch {
	case direct:
		buf = append(buf, member(roleNoTrack, e))
	case vs.SNAT == config.SNATAlways:
		buf = append(buf, member(roleMasqAll, e))
	case vs.SNAT == config.SNATAuto:
		buf = append(buf, member(roleMasqAuto, e))
	}
	for _, d := range vs.Dests {
		a := d.Addr.Addr()
		if !direct {
			buf = append(buf, member(roleLoopback, SetEntry{IP: a, Proto: k.Protocol, Port: d.Addr.Port(), IP2: a}))
		}
		// A DR real server is on the flat network too: what it sends to
		// a NAT service is masqueraded like any real server's.
		if len(st.sets.rsNets) == 0 {
			buf = append(buf, member(roleRSNets, SetEntry{Net: netip.PrefixFrom(a, a.BitLen())}))
		}
	}
	return st.appendFirewall(buf, e, vs.SourceRanges)
}

// appendFirewall appends the members that restrict VIP,proto:port e to
// the source ranges, if any.
func (st *State) appendFirewall(buf []Member, e SetEntry, ranges []netip.Prefix) []Member {
	if len(ranges) == 0 {
		return buf
	}
	buf = append(buf, member(roleFirewall, e))
	for _, p := range ranges {
		buf = append(buf, member(roleSrcRanges, SetEntry{IP: e.IP, Proto: e.Proto, Port: e.Port, Net: p}))
	}
	// The director itself may always reach the service: from the VIP (the
	// source the kernel picks for a local destination) and from the box's
	// own addresses (lbd's dummy interface's are not among them: they are
	// the VIPs, thousands maybe, and each would be an entry per service).
	buf = append(buf, member(roleSrcIPs, SetEntry{IP: e.IP, Proto: e.Proto, Port: e.Port, IP2: e.IP}))
	for _, a := range st.sets.hostAddrs {
		if a.Is4() == e.IP.Is4() && a != e.IP {
			buf = append(buf, member(roleSrcIPs, SetEntry{IP: e.IP, Proto: e.Proto, Port: e.Port, IP2: a}))
		}
	}
	return buf
}

// SameMembers reports whether two virtual servers of the same key need
// the same set members, given the same set inputs.
func SameMembers(a, b *Service) bool {
	if a.Key != b.Key || a.SNAT != b.SNAT || a.NodePort != b.NodePort || a.Method != b.Method || len(a.Dests) != len(b.Dests) ||
		!slices.Equal(a.SourceRanges, b.SourceRanges) || !a.Marked.equal(b.Marked) {
		return false
	}
	if len(a.Dests) == 0 || &a.Dests[0] == &b.Dests[0] {
		return true // shared: Compute reuses an unchanged service's destinations
	}
	for i := range a.Dests {
		if a.Dests[i].Addr != b.Dests[i].Addr {
			return false
		}
	}
	return true
}

// SetEntries returns every set's entries, without duplicates and in no
// particular order, with an entry (possibly nil) for every set lbd owns.
// It is for lbd plan and tests; the ipset applier works from the members.
func (st *State) SetEntries() map[string][]SetEntry {
	out := make(map[string][]SetEntry, NumSets)
	for _, spec := range SetSpecs() {
		out[spec.Name] = nil
	}
	seen := map[Member]bool{}
	add := func(ms []Member) {
		for _, m := range ms {
			if !seen[m] {
				seen[m] = true
				name := m.Set.Spec().Name
				out[name] = append(out[name], m.Entry)
			}
		}
	}
	var buf []Member
	add(st.AppendGlobalMembers(buf[:0]))
	for i := range st.Services {
		buf = st.AppendMembers(buf[:0], &st.Services[i])
		add(buf)
	}
	return out
}

// nodeAddrs returns the box's addresses that serve NodePort-like services:
// inside node_cidrs, never loopback, link-local or one of lbd's VIPs
// (sorted).
func nodeAddrs(cfg *config.Config, hostAddrs []netip.Addr, vips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range hostAddrs {
		if _, isVIP := slices.BinarySearchFunc(vips, a, netip.Addr.Compare); isVIP || a.IsLoopback() || a.IsLinkLocalUnicast() {
			continue
		}
		if slices.ContainsFunc(cfg.Dataplane.NodeCIDRs, func(p netip.Prefix) bool { return p.Contains(a) }) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}
