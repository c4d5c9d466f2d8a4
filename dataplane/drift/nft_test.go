package drift

import (
	"slices"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
)

func lbdTables(families ...int) map[int][]desired.Table {
	out := map[int][]desired.Table{}
	for _, f := range families {
		out[f] = desired.Tables(config.Defaults().Dataplane, f)
	}
	return out
}

func TestNFTRulesClassifiesTransactions(t *testing.T) {
	const lbd, them = 4242, 777
	const (
		appended = 0xc00 // NLM_F_APPEND|NLM_F_CREATE: iptables -A
		inserted = 0x400 // NLM_F_CREATE: iptables -I
	)
	ip4, ip6 := uint8(nfprotoIPv4), uint8(nfprotoIPv6)
	foreign := func(p place, o op, more int) finding {
		return finding{kind: rulesChanged, rules: change{p, o}, more: more, pid: them, proc: "iptables"}
	}
	filter := func(chain string) place { return place{ip4, "filter", chain} }
	tests := []struct {
		name     string
		families []int
		msgs     []genl.Message
		want     []finding
	}{
		{"iptables -F LBD-INPUT by someone else", []int{4},
			[]genl.Message{delRule("filter", "LBD-INPUT", ""), delRule("filter", "LBD-INPUT", "LBD-SOURCE-RANGES"), newGen(them, "iptables")},
			[]finding{foreign(filter("LBD-INPUT"), ruleDeleted, 1)}},
		{"lbd's own restore rewriting its chains and jumps", []int{4},
			[]genl.Message{delRule("filter", "LBD-INPUT", ""), rule(nftMsgNewRule, appended, ip4, "filter", "LBD-INPUT", ""),
				delRule("filter", "INPUT", "LBD-INPUT"), rule(nftMsgNewRule, inserted, ip4, "filter", "INPUT", "LBD-INPUT"),
				chainMsg(nftMsgNewChain, ip4, "filter", "LBD-FORWARD"), newGen(lbd, "iptables-nft-re")},
			nil},
		{"a transaction that names no process is not lbd's", []int{4},
			[]genl.Message{delRule("filter", "LBD-INPUT", ""), newGen(0, "")},
			[]finding{{kind: rulesChanged, rules: change{filter("LBD-INPUT"), ruleDeleted}}}},
		{"only the transactions of others count", []int{4},
			[]genl.Message{delRule("filter", "LBD-INPUT", ""), newGen(lbd, "x"), newGen(them, "iptables"),
				rule(nftMsgNewRule, appended, ip4, "nat", "LBD-SERVICES", ""), newGen(them, "iptables")},
			[]finding{foreign(place{ip4, "nat", "LBD-SERVICES"}, ruleAdded, 0)}},
		{"other tables, chains and families are not lbd's", []int{4, 6},
			[]genl.Message{rule(nftMsgNewRule, inserted, ip4, "mangle", "INPUT", ""), delRule("filter", "f2b-sshd", ""),
				rule(nftMsgNewRule, inserted, 1 /* inet */, "filter", "LBD-INPUT", ""), chainMsg(nftMsgDelChain, ip4, "mangle", "PREROUTING"),
				nftMsg(nftMsgDelTable, 0, ip4, str(nftaTableName, "mangle")), newGen(them, "iptables")},
			nil},
		{"raw PREROUTING holds lbd's jump to its NOTRACK chain", []int{4},
			[]genl.Message{chainMsg(nftMsgDelChain, ip4, "raw", "PREROUTING"), newGen(them, "iptables")},
			[]finding{foreign(place{ip4, "raw", "PREROUTING"}, chainDeleted, 0)}},
		{"ip6tables rules count only when lbd writes them", []int{4},
			[]genl.Message{rule(nftMsgDelRule, 0, ip6, "filter", "LBD-INPUT", ""), newGen(them, "ip6tables")},
			nil},
		{"ip6tables -F LBD-INPUT", []int{4, 6},
			[]genl.Message{rule(nftMsgDelRule, 0, ip6, "filter", "LBD-INPUT", ""), newGen(them, "iptables")},
			[]finding{foreign(place{ip6, "filter", "LBD-INPUT"}, ruleDeleted, 0)}},
		{"a rule appended after lbd's jumps cannot hide them", []int{4},
			[]genl.Message{rule(nftMsgNewRule, appended, ip4, "filter", "INPUT", ""), rule(nftMsgNewRule, inserted, ip4, "nat", "POSTROUTING", ""),
				rule(nftMsgNewRule, appended, ip4, "nat", "PREROUTING", ""), newGen(them, "iptables")},
			nil},
		{"a rule inserted into a chain whose jump must come first", []int{4},
			[]genl.Message{rule(nftMsgNewRule, inserted, ip4, "filter", "FORWARD", ""), newGen(them, "dockerd")},
			[]finding{{kind: rulesChanged, rules: change{filter("FORWARD"), ruleAdded}, pid: them, proc: "dockerd"}}},
		{"a rule inserted at a position there", []int{4},
			[]genl.Message{nftMsg(nftMsgNewRule, inserted, ip4, str(nftaRuleTable, "filter"), str(nftaRuleChain, "INPUT"), attr(nftaRulePos, make([]byte, 8))),
				newGen(them, "iptables")},
			[]finding{foreign(filter("INPUT"), ruleAdded, 0)}},
		{"deleting lbd's jump, not another one", []int{4},
			[]genl.Message{delRule("filter", "INPUT", "f2b-sshd"), delRule("filter", "INPUT", "DOCKER-USER"), newGen(them, "iptables"),
				delRule("nat", "POSTROUTING", "LBD-POSTROUTING"), newGen(them, "iptables")},
			[]finding{foreign(place{ip4, "nat", "POSTROUTING"}, ruleDeleted, 0)}},
		{"a deleted rule whose expressions are not told may be lbd's jump", []int{4},
			[]genl.Message{nftMsg(nftMsgDelRule, 0, ip4, str(nftaRuleTable, "filter"), str(nftaRuleChain, "INPUT")), newGen(them, "iptables")},
			[]finding{foreign(filter("INPUT"), ruleDeleted, 0)}},
		{"chains: lbd's deleted or created, a built-in one deleted, not a policy change", []int{4},
			[]genl.Message{chainMsg(nftMsgNewChain, ip4, "filter", "INPUT"), newGen(them, "iptables"),
				chainMsg(nftMsgDelChain, ip4, "filter", "LBD-FORWARD"), newGen(them, "iptables"),
				chainMsg(nftMsgNewChain, ip4, "nat", "LBD-MARK-MASQ"), newGen(them, "iptables"),
				chainMsg(nftMsgDelChain, ip4, "nat", "OUTPUT"), newGen(them, "nft")},
			[]finding{foreign(filter("LBD-FORWARD"), chainDeleted, 0), foreign(place{ip4, "nat", "LBD-MARK-MASQ"}, chainAdded, 0),
				{kind: rulesChanged, rules: change{place{ip4, "nat", "OUTPUT"}, chainDeleted}, pid: them, proc: "nft"}}},
		{"nft flush ruleset", []int{4},
			[]genl.Message{delRule("filter", "INPUT", "LBD-INPUT"), chainMsg(nftMsgDelChain, ip4, "filter", "LBD-INPUT"),
				nftMsg(nftMsgDelTable, 0, ip4, str(nftaTableName, "filter")), newGen(them, "nft")},
			[]finding{{kind: rulesChanged, rules: change{filter("INPUT"), ruleDeleted}, more: 2, pid: them, proc: "nft"}}},
		{"messages of other subsystems and short ones are ignored", []int{4},
			[]genl.Message{{Type: 6<<8 | nftMsgDelRule, Payload: delRule("filter", "LBD-INPUT", "").Payload}, {Type: nfnlSubsysNFTables << 8}, newGen(them, "iptables")},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNFTRules(lbdTables(tt.families...), func(pid int) bool { return pid == lbd })
			var got []finding
			for _, m := range tt.msgs {
				if f, ok := n.message(m); ok {
					got = append(got, f)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("findings\n  %v\nwant\n  %v", got, tt.want)
			}
		})
	}
}

func TestNFTRulesForgetsALostTransaction(t *testing.T) {
	n := newNFTRules(lbdTables(4), func(int) bool { return false })
	n.message(delRule("filter", "LBD-INPUT", ""))
	n.reset() // its NEWGEN may have been lost with the rest
	if f, ok := n.message(newGen(9, "x")); ok {
		t.Errorf("a change before the loss was reported with the next transaction: %v", f)
	}
}

func TestFindingString(t *testing.T) {
	for _, tt := range []struct {
		f    finding
		want string
	}{
		{finding{kind: rulesChanged, rules: change{place{nfprotoIPv4, "filter", "LBD-INPUT"}, ruleDeleted}, more: 8, pid: 31, proc: "iptables"},
			"nftables: ip filter LBD-INPUT: rule deleted (and 8 more changes of lbd's rules) by iptables (pid 31)"},
		{finding{kind: rulesChanged, rules: change{place{family: nfprotoIPv6, table: "nat"}, tableDeleted}},
			"nftables: ip6 nat: table deleted"},
		{finding{kind: addrRemoved, link: "lbd0", addr: mustAddr("198.18.100.1"), more: 2},
			"addresses: VIP 198.18.100.1 removed from lbd0 (and 2 more)"},
		{finding{kind: addrAdded, link: "lbd0", addr: mustAddr("2001:db8::1")},
			"addresses: 2001:db8::1 added to lbd0, which lbd does not bind"},
		{finding{kind: linkGone, link: "lbd0"}, "addresses: link lbd0 deleted"},
		{finding{kind: linkDown, link: "lbd0"}, "addresses: link lbd0 set down"},
		{finding{kind: missed, source: "nftables notifications lost (receive buffer full)"},
			"nftables notifications lost (receive buffer full); what changed meanwhile is unknown"},
	} {
		if got := tt.f.String(); got != tt.want {
			t.Errorf("%+v:\n got %q\nwant %q", tt.f, got, tt.want)
		}
	}
}

// TestNFTRulesBigTransactionKeepsOneChange: a foreign `nft flush ruleset`
// of a big firewall is one transaction of many thousands of messages; the
// watcher keeps its first relevant change and a count, not the messages.
func TestNFTRulesBigTransactionKeepsOneChange(t *testing.T) {
	n := newNFTRules(lbdTables(4), func(int) bool { return false })
	del := delRule("filter", "LBD-INPUT", "")
	allocs := testing.AllocsPerRun(10000, func() { n.message(del) })
	if allocs > 4 {
		t.Errorf("%.1f allocations per message; want at most 4, whatever the transaction's size", allocs)
	}
	f, ok := n.message(newGen(5, "nft"))
	if !ok || f.more != 10000 { // AllocsPerRun runs it once more to warm up
		t.Errorf("finding %+v, %v; want the first change and 10000 more", f, ok)
	}
}
