package drift

import (
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// seeds are well-formed notifications of every kind the watcher reads.
func seeds() []genl.Message {
	return []genl.Message{
		delRule("filter", "INPUT", "LBD-INPUT"), rule(nftMsgNewRule, 0x400, nfprotoIPv4, "filter", "FORWARD", "LBD-FORWARD"),
		chainMsg(nftMsgDelChain, nfprotoIPv4, "nat", "LBD-SERVICES"), nftMsg(nftMsgDelTable, 0, nfprotoIPv6, str(nftaTableName, "filter")),
		newGen(99, "iptables"),
		linkMsg(rtmNewLink, 7, "lbd0", true), linkMsg(rtmDelLink, 7, "lbd0", false),
		addrMsg(rtmNewAddr, 7, "198.18.100.1"), addrMsg(rtmDelAddr, 7, "2001:db8::1"),
	}
}

// feed hands one datagram to both classifiers and judges the window.
func feed(b []byte) {
	n := newNFTRules(lbdTables(4, 6), func(pid int) bool { return pid == 1 })
	r := newRouteEvents("lbd0", 7)
	for m := range genl.Messages(b) {
		n.message(m)
		r.message(m)
	}
	r.verdict(func(netip.Addr, bool) bool { return false })
}

// TestTruncatedNotifications cuts every seed at every length, and hands
// each cut payload to every kind of message: nothing may panic.
func TestTruncatedNotifications(t *testing.T) {
	types := []uint16{rtmNewLink, rtmDelLink, rtmNewAddr, rtmDelAddr}
	for _, msg := range []uint16{nftMsgDelTable, nftMsgNewChain, nftMsgDelChain, nftMsgNewRule, nftMsgDelRule, nftMsgNewGen} {
		types = append(types, nfnlSubsysNFTables<<8|msg)
	}
	for _, s := range seeds() {
		for cut := range len(s.Payload) + 1 {
			for _, typ := range types {
				feed(datagram(genl.Message{Type: typ, Flags: s.Flags, Payload: s.Payload[:cut]}))
			}
		}
		b := datagram(s)
		for cut := range len(b) + 1 {
			feed(b[:cut])
		}
	}
}

func FuzzNotifications(f *testing.F) {
	for _, s := range seeds() {
		f.Add(datagram(s))
	}
	f.Add(datagram(seeds()...))
	f.Fuzz(func(t *testing.T, b []byte) { feed(b) })
}
