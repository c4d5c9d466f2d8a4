package desired

import (
	"fmt"
	"strings"

	"github.com/lbdproject/lbd/config"
)

// Table is lbd's part of one iptables table: its own chains with their
// rules, and one jump into each from a built-in chain. The rules are fixed
// — they match sets — so their number does not grow with services.
type Table struct {
	Name   string   // nat, filter or raw
	Chains []string // lbd's chains, in declaration order
	Rules  []string // "-A CHAIN ..." lines, in order
	Jumps  []Jump
}

// Jump is the one rule in a built-in chain that leads to lbd's chain.
type Jump struct {
	From string // built-in chain
	To   string // lbd chain
	// First puts the jump at the top of From, ahead of a host firewall
	// (ufw, a default-drop INPUT) that would drop lbd's traffic.
	First bool
}

// Rule returns the jump as a rule specification (without -A/-I CHAIN), in
// the form iptables-save prints it.
func (j Jump) Rule() string {
	return "-m comment --comment lbd -j " + j.To
}

// FilterTool names the packet filter's command of a family (4 or 6):
// iptables or ip6tables.
func FilterTool(family int) string {
	if family == 6 {
		return "ip6tables"
	}
	return "iptables"
}

// Tables returns lbd's nat, filter and raw rules for one family (iptables for
// 4, ip6tables for 6), following kube-proxy's IPVS mode. Rules are written
// exactly as iptables-save prints them (--or-mark is saved as --set-xmark
// V/V, --xor-mark as --set-xmark V/0x0), so that a dump compares equal to
// them and a full sync with nothing to change writes nothing.
func Tables(dp config.Dataplane, family int) []Table {
	set := func(role string) string { return SetName(role, family) }
	mark := dp.MasqueradeMark()
	markMask := fmt.Sprintf("%#x/%#x", mark, mark)
	loopback := "127.0.0.0/8"
	reject := "icmp-port-unreachable"
	if family == 6 {
		loopback, reject = "::1/128", "icmp6-port-unreachable"
	}
	nat := Table{
		Name:   "nat",
		Chains: []string{"LBD-SERVICES", "LBD-POSTROUTING", "LBD-MARK-MASQ"},
		Rules: []string{
			// Loopback sources are the box talking to itself: never SNAT.
			"-A LBD-SERVICES -s " + loopback + " -j RETURN",
			"-A LBD-SERVICES -m set --match-set " + set(SetMasqAll) + " dst,dst -j LBD-MARK-MASQ",
			"-A LBD-SERVICES -m set --match-set " + set(SetMasqAuto) + " dst,dst -m set ! --match-set " + set(SetLocalNets) + " src -j LBD-MARK-MASQ",
			// Real server A -> VIP -> real server B on one flat network:
			// without SNAT, B would answer A directly. Not for DR and
			// tunnels, whose real servers answer everyone directly (their
			// packets are NOTRACK and skip this table anyway), nor for
			// what lbd marks for firewall-mark services: IPVS matches the
			// whole mark, so theirs is decided after IPVS (fwmarkTables).
			"-A LBD-SERVICES -m set --match-set " + set(SetServices) + " dst,dst -m set ! --match-set " + set(SetNoTrack) + " dst,dst -m set ! --match-set " + set(SetFWMark) + " dst,dst -m set --match-set " + set(SetRSNets) + " src -j LBD-MARK-MASQ",
			"-A LBD-MARK-MASQ -j MARK --set-xmark " + markMask, // --or-mark
			// A real server reaching itself through its VIP (hairpin).
			"-A LBD-POSTROUTING -m set --match-set " + set(SetLoopback) + " dst,dst,src -j MASQUERADE",
			"-A LBD-POSTROUTING -m mark ! --mark " + markMask + " -j RETURN",
			// Clear the mark so that re-entering packets are not SNATed twice.
			"-A LBD-POSTROUTING -j MARK --set-xmark " + fmt.Sprintf("%#x/0x0", mark), // --xor-mark
			masqueradeMarked,
		},
		Jumps: []Jump{
			{From: "PREROUTING", To: "LBD-SERVICES"},
			{From: "OUTPUT", To: "LBD-SERVICES"},
			{From: "POSTROUTING", To: "LBD-POSTROUTING"},
		},
	}
	filter := Table{
		Name:   "filter",
		Chains: []string{"LBD-INPUT", "LBD-SOURCE-RANGES", "LBD-FORWARD"},
		Rules: []string{
			// IPVS takes requests at LOCAL_IN, after filter INPUT: the
			// source-range DROP and the accept of served ports belong here.
			"-A LBD-INPUT -m set --match-set " + set(SetFirewall) + " dst,dst -j LBD-SOURCE-RANGES",
			"-A LBD-INPUT -m set --match-set " + set(SetServices) + " dst,dst -j ACCEPT",
			"-A LBD-INPUT -p tcp -m conntrack --ctstate NEW -m set --match-set " + set(SetVIPs) + " dst -j REJECT --reject-with tcp-reset",
			"-A LBD-INPUT -m conntrack --ctstate NEW -m set --match-set " + set(SetVIPs) + " dst -j REJECT --reject-with " + reject,
			"-A LBD-SOURCE-RANGES -m set --match-set " + set(SetSrcRanges) + " dst,dst,src -j ACCEPT",
			"-A LBD-SOURCE-RANGES -m set --match-set " + set(SetSrcIPs) + " dst,dst,src -j ACCEPT",
			// Drop, not reject: a refused client learns nothing.
			"-A LBD-SOURCE-RANGES -j DROP",
			"-A LBD-FORWARD -m mark --mark " + markMask + " -j ACCEPT",
			"-A LBD-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		},
		Jumps: []Jump{
			{From: "INPUT", To: "LBD-INPUT", First: true},
			{From: "FORWARD", To: "LBD-FORWARD", First: true},
		},
	}
	// DR and tunnel replies bypass the director: conntrack would see one
	// direction only (INVALID entries, dropped by a strict host firewall,
	// filling the table). Only served VIP:ports are skipped, so a new
	// connection to an unserved port is still NEW, and rejected above;
	// served ones are accepted above whatever their state.
	raw := Table{
		Name:   "raw",
		Chains: []string{"LBD-PREROUTING"},
		Rules: []string{
			"-A LBD-PREROUTING -m set --match-set " + set(SetNoTrack) + " dst,dst -j CT --notrack",
		},
		Jumps: []Jump{{From: "PREROUTING", To: "LBD-PREROUTING"}},
	}
	return []Table{nat, filter, raw}
}

// masqueradeMarked is the last rule of LBD-POSTROUTING: what is marked
// leaves from the box's own address (see withSNAT for a pair's).
const masqueradeMarked = "-A LBD-POSTROUTING -j MASQUERADE --random-fully"

// RestoreInput renders t as iptables-restore --noflush input: declaring a
// chain flushes it, so only lbd's chains are rewritten.
func RestoreInput(t Table) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%s\n", t.Name)
	for _, c := range t.Chains {
		fmt.Fprintf(&b, ":%s - [0:0]\n", c)
	}
	for _, r := range t.Rules {
		b.WriteString(r)
		b.WriteByte('\n')
	}
	b.WriteString("COMMIT\n")
	return b.String()
}
