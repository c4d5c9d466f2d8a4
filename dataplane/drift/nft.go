package drift

import (
	"encoding/binary"
	"fmt"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
)

// nftables notifications (linux/netfilter/nf_tables.h,
// linux/netfilter/nfnetlink.h). A message's type is the subsystem in the
// high byte and the message in the low one; its payload is a 4-byte
// nfgenmsg (family, version, resource id) and attributes.
const (
	nfnlSubsysNFTables = 10
	nfnlgrpNFTables    = 7
	nfgenmsgLen        = 4

	nftMsgDelTable = 2
	nftMsgNewChain = 3
	nftMsgDelChain = 5
	nftMsgNewRule  = 6
	nftMsgDelRule  = 8
	nftMsgNewGen   = 15

	nftaTableName   = 1 // NFTA_TABLE_NAME
	nftaChainTable  = 1 // NFTA_CHAIN_TABLE
	nftaChainName   = 3 // NFTA_CHAIN_NAME
	nftaRuleTable   = 1 // NFTA_RULE_TABLE
	nftaRuleChain   = 2 // NFTA_RULE_CHAIN
	nftaRuleExprs   = 4 // NFTA_RULE_EXPRESSIONS
	nftaRulePos     = 6 // NFTA_RULE_POSITION
	nftaGenProcPID  = 2 // NFTA_GEN_PROC_PID, big-endian
	nftaGenProcName = 3 // NFTA_GEN_PROC_NAME

	nftaListElem      = 1 // NFTA_LIST_ELEM
	nftaExprName      = 1 // NFTA_EXPR_NAME
	nftaExprData      = 2 // NFTA_EXPR_DATA
	nftaImmediateData = 2 // NFTA_IMMEDIATE_DATA
	nftaDataVerdict   = 2 // NFTA_DATA_VERDICT
	nftaVerdictChain  = 2 // NFTA_VERDICT_CHAIN

	nfprotoIPv4 = 2
	nfprotoIPv6 = 10

	nlmFAppend  = 0x800 // NLM_F_APPEND
	nlmFReplace = 0x100 // NLM_F_REPLACE
)

// role is what a chain of an iptables-nft table is to lbd.
type role uint8

const (
	lbdChain role = iota + 1 // one of lbd's LBD-* chains
	// jumpChain is a built-in chain holding a jump to lbd's chain
	// anywhere: a rule added to it cannot break lbd's.
	jumpChain
	// firstJumpChain is a built-in chain whose first rule must be lbd's
	// jump: a rule inserted there may be above it.
	firstJumpChain
)

// place names a chain of a table of a family (NFPROTO_IPV4 or _IPV6).
type place struct {
	family uint8
	table  string
	chain  string
}

func (p place) String() string {
	fam := "ip"
	if p.family == nfprotoIPv6 {
		fam = "ip6"
	}
	if p.chain == "" {
		return fam + " " + p.table
	}
	return fam + " " + p.table + " " + p.chain
}

// op is what a notification says happened to a place.
type op uint8

const (
	tableDeleted op = iota + 1
	chainAdded
	chainDeleted
	ruleAdded
	ruleDeleted
)

func (o op) String() string {
	switch o {
	case tableDeleted:
		return "table deleted"
	case chainAdded:
		return "chain created"
	case chainDeleted:
		return "chain deleted"
	case ruleAdded:
		return "rule added"
	case ruleDeleted:
		return "rule deleted"
	}
	return "changed"
}

// change is one change of a transaction that touches lbd's rules.
type change struct {
	at place
	op op
}

// nftRules classifies nftables notifications: it gathers the changes of
// one transaction that touch lbd's chains or the jumps to them, and when
// the transaction's NEWGEN names a process that is not one of lbd's own
// iptables-restore children, reports them as drift. One goroutine uses it.
type nftRules struct {
	roles   map[place]role
	tables  map[place]bool  // lbd's tables (chain "")
	targets map[string]bool // lbd's chains, which its jumps lead to
	own     func(pid int) bool
	// first and more are the current transaction's relevant changes, up
	// to its NEWGEN: the first, and how many others.
	first *change
	more  int
}

func newNFTRules(tables map[int][]desired.Table, own func(pid int) bool) *nftRules {
	n := &nftRules{roles: map[place]role{}, tables: map[place]bool{}, targets: map[string]bool{}, own: own}
	for fam, ts := range tables {
		proto := uint8(nfprotoIPv4)
		if fam == 6 {
			proto = nfprotoIPv6
		}
		for _, t := range ts {
			n.tables[place{proto, t.Name, ""}] = true
			for _, c := range t.Chains {
				n.roles[place{proto, t.Name, c}] = lbdChain
				n.targets[c] = true
			}
			for _, j := range t.Jumps {
				p := place{proto, t.Name, j.From}
				if j.First {
					n.roles[p] = firstJumpChain
				} else if n.roles[p] == 0 {
					n.roles[p] = jumpChain
				}
			}
		}
	}
	return n
}

// reset forgets the current transaction (notifications were lost).
func (n *nftRules) reset() { n.first, n.more = nil, 0 }

// message takes one notification; at the NEWGEN that ends a foreign
// transaction touching lbd's rules it returns that finding.
func (n *nftRules) message(m genl.Message) (finding, bool) {
	if m.Type>>8 != nfnlSubsysNFTables || len(m.Payload) < nfgenmsgLen {
		return finding{}, false
	}
	family, attrs := m.Payload[0], m.Payload[nfgenmsgLen:]
	msg := m.Type & 0xff
	if msg == nftMsgNewGen {
		return n.commit(attrs)
	}
	if family != nfprotoIPv4 && family != nfprotoIPv6 {
		return finding{}, false
	}
	var c change
	var ok bool
	switch msg {
	case nftMsgDelTable:
		c, ok = n.table(family, attrs)
	case nftMsgNewChain, nftMsgDelChain:
		c, ok = n.chain(family, msg == nftMsgDelChain, attrs)
	case nftMsgNewRule, nftMsgDelRule:
		c, ok = n.rule(family, msg == nftMsgDelRule, m.Flags, attrs)
	}
	if ok {
		if n.first == nil {
			n.first = &c
		} else {
			n.more++
		}
	}
	return finding{}, false
}

// commit ends a transaction: its changes are drift unless lbd's own
// process committed it.
func (n *nftRules) commit(attrs []byte) (finding, bool) {
	first, more := n.first, n.more
	n.reset()
	if first == nil {
		return finding{}, false
	}
	pid, name := 0, ""
	for t, v := range genl.Attrs(attrs) {
		switch t {
		case nftaGenProcPID:
			if len(v) >= 4 {
				pid = int(binary.BigEndian.Uint32(v))
			}
		case nftaGenProcName:
			name = cString(v)
		}
	}
	if n.own != nil && n.own(pid) {
		return finding{}, false
	}
	return finding{kind: rulesChanged, rules: *first, more: more, pid: pid, proc: name}, true
}

func (n *nftRules) table(family uint8, attrs []byte) (change, bool) {
	for t, v := range genl.Attrs(attrs) {
		if t == nftaTableName {
			p := place{family: family, table: cString(v)}
			return change{p, tableDeleted}, n.tables[p]
		}
	}
	return change{}, false
}

// chain: a chain of lbd's deleted or created (renamed to), or a built-in
// chain holding a jump deleted. A built-in chain's NEWCHAIN is a policy
// change (iptables -P), none of lbd's business.
func (n *nftRules) chain(family uint8, deleted bool, attrs []byte) (change, bool) {
	p := place{family: family}
	for t, v := range genl.Attrs(attrs) {
		switch t {
		case nftaChainTable:
			p.table = cString(v)
		case nftaChainName:
			p.chain = cString(v)
		}
	}
	r := n.roles[p]
	if deleted {
		return change{p, chainDeleted}, r != 0
	}
	return change{p, chainAdded}, r == lbdChain
}

// rule: any rule added to or deleted from lbd's chains; in a built-in
// chain, a deleted rule that jumps to lbd's chains (or whose expressions
// the notification does not carry), and a rule added anywhere but at the
// end of a chain whose jump must come first.
func (n *nftRules) rule(family uint8, deleted bool, flags uint16, attrs []byte) (change, bool) {
	p := place{family: family}
	var exprs []byte
	hasExprs, positioned := false, false
	for t, v := range genl.Attrs(attrs) {
		switch t {
		case nftaRuleTable:
			p.table = cString(v)
		case nftaRuleChain:
			p.chain = cString(v)
		case nftaRuleExprs:
			exprs, hasExprs = v, true
		case nftaRulePos:
			positioned = true
		}
	}
	c := change{p, ruleAdded}
	if deleted {
		c.op = ruleDeleted
	}
	switch n.roles[p] {
	case lbdChain:
		return c, true
	case jumpChain, firstJumpChain:
		if deleted {
			return c, !hasExprs || n.jumpsToLBD(exprs)
		}
		appended := flags&nlmFAppend != 0 && flags&nlmFReplace == 0 && !positioned
		return c, n.roles[p] == firstJumpChain && !appended
	}
	return c, false
}

// jumpsToLBD reports whether a rule's expressions hold a verdict that
// leads to one of lbd's chains (iptables-nft writes `-j LBD-X` as an
// immediate verdict).
func (n *nftRules) jumpsToLBD(exprs []byte) bool {
	for t, elem := range genl.Attrs(exprs) {
		if t != nftaListElem {
			continue
		}
		var name string
		var data []byte
		for t, v := range genl.Attrs(elem) {
			switch t {
			case nftaExprName:
				name = cString(v)
			case nftaExprData:
				data = v
			}
		}
		if name == "immediate" && n.targets[verdictChain(data)] {
			return true
		}
	}
	return false
}

// verdictChain returns the chain an immediate expression's verdict names,
// or "".
func verdictChain(data []byte) string {
	for t, v := range genl.Attrs(data) {
		if t != nftaImmediateData {
			continue
		}
		for t, v := range genl.Attrs(v) {
			if t != nftaDataVerdict {
				continue
			}
			for t, v := range genl.Attrs(v) {
				if t == nftaVerdictChain {
					return cString(v)
				}
			}
		}
	}
	return ""
}

// cString returns a netlink string attribute without its NUL.
func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// describe says what a transaction did, for the log.
func (c change) describe(more, pid int, proc string) string {
	s := fmt.Sprintf("nftables: %s: %s", c.at, c.op)
	if more > 0 {
		s += fmt.Sprintf(" (and %d more changes of lbd's rules)", more)
	}
	switch {
	case proc != "":
		s += fmt.Sprintf(" by %s (pid %d)", proc, pid)
	case pid != 0:
		s += fmt.Sprintf(" by pid %d", pid)
	}
	return s
}
