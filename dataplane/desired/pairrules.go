package desired

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/ha/vrrp"
)

// TablesFor is Tables for a whole configuration: with a failover pair,
// LBD-INPUT also accepts its VRRP adverts, its IPVS connection sync and
// conntrackd's replication ahead of a host firewall that would drop them
// (both boxes would become master; the standby would learn no
// connection); with conntrackd, masqueraded connections leaving by
// the inside link are SNATed to its floating address; and the mangle
// table that marks packets for firewall-mark services (always there,
// fixed), with the masquerading of each NAT one (fwmarkTables).
func TablesFor(cfg *config.Config, family int) []Table {
	ts := fwmarkTables(cfg, family, Tables(cfg.Dataplane, family))
	extra := pairRules(cfg, family)
	for i := range ts {
		switch {
		case ts[i].Name == "filter" && len(extra) > 0:
			ts[i].Rules = append(slices.Clip(ts[i].Rules), extra...)
		case ts[i].Name == "nat":
			ts[i].Rules = withSNAT(cfg, family, ts[i].Rules)
		}
	}
	return ts
}

// withSNAT puts, ahead of the final MASQUERADE, the SNAT to the family's
// floating address for connections leaving by its link: the box that
// takes over holds that address, and conntrackd has given it the
// translations, so the real servers' replies still find their
// connection. Masquerading to each box's own address would send them to
// the box that failed.
func withSNAT(cfg *config.Config, family int, rules []string) []string {
	ct := cfg.Conntrackd
	if !ct.Enabled {
		return rules
	}
	for _, a := range ct.SNATAddresses {
		f, ok := cfg.FloatingAddress(a)
		if !ok || a.Is4() != (family == 4) {
			continue
		}
		snat := fmt.Sprintf("-A LBD-POSTROUTING -o %s -j SNAT --to-source %s --random-fully", f.Interface, a)
		at := slices.Index(rules, masqueradeMarked)
		if at < 0 {
			at = len(rules)
		}
		return slices.Insert(slices.Clip(rules), at, snat)
	}
	return rules
}

// pairRules are written as iptables-save prints them (addresses with
// their length, -p vrrp from /etc/protocols, -m udp), so that a dump
// compares equal.
func pairRules(cfg *config.Config, family int) []string {
	var out []string
	seen := map[string]bool{}
	add := func(r string) {
		if !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	for _, v := range cfg.VRRP {
		if v.Family() != family {
			continue
		}
		if len(v.UnicastPeers) == 0 {
			group := vrrp.Group4
			if family == 6 {
				group = vrrp.Group6
			}
			add(fmt.Sprintf("-A LBD-INPUT -d %s -i %s -p vrrp -j ACCEPT", host(group), v.Interface))
		}
		for _, p := range v.UnicastPeers {
			add(fmt.Sprintf("-A LBD-INPUT -s %s -i %s -p vrrp -j ACCEPT", host(p), v.Interface))
		}
	}
	// Connection sync is not authenticated: only the peer may send it.
	if s := cfg.IPVSSync; s.Enabled && s.SyncGroup().Is4() == (family == 4) {
		g, port := host(s.SyncGroup()), s.SyncPort()
		add(fmt.Sprintf("-A LBD-INPUT -s %s -d %s -i %s -p udp -m udp --dport %d -j ACCEPT", host(s.Peer), g, s.Interface, port))
		add(fmt.Sprintf("-A LBD-INPUT -d %s -i %s -p udp -m udp --dport %d -j DROP", g, s.Interface, port))
	}
	// Nor is conntrackd's replication, which the new master commits into
	// its conntrack table.
	if ct := cfg.Conntrackd; ct.Enabled && ct.Peer.Is4() == (family == 4) {
		add(fmt.Sprintf("-A LBD-INPUT -s %s -i %s -p udp -m udp --dport %d -j ACCEPT", host(ct.Peer), ct.Interface, ct.Port))
		add(fmt.Sprintf("-A LBD-INPUT -i %s -p udp -m udp --dport %d -j DROP", ct.Interface, ct.Port))
	}
	return out
}

// host renders a as a host prefix, as iptables-save does.
func host(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }
