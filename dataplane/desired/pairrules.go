package desired

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/ha/vrrp"
)

// TablesFor is Tables for a whole configuration: with a failover pair,
// LBD-INPUT also accepts its VRRP adverts and its IPVS connection sync
// ahead of a host firewall that would drop them (both boxes would become
// master; the standby would learn no connection).
func TablesFor(cfg *config.Config, family int) []Table {
	ts := Tables(cfg.Dataplane, family)
	extra := pairRules(cfg, family)
	for i := range ts {
		if ts[i].Name == "filter" && len(extra) > 0 {
			ts[i].Rules = append(slices.Clip(ts[i].Rules), extra...)
		}
	}
	return ts
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
	return out
}

// host renders a as a host prefix, as iptables-save does.
func host(a netip.Addr) string { return netip.PrefixFrom(a, a.BitLen()).String() }
