package drift

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// Builders of the kernel's notifications, as the kernel lays them out.

func attr(typ uint16, v []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, v...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func str(typ uint16, s string) []byte { return attr(typ, append([]byte(s), 0)) }

func nest(typ uint16, parts ...[]byte) []byte { return attr(typ|0x8000, slices.Concat(parts...)) }

func be32(typ uint16, v uint32) []byte { return attr(typ, binary.BigEndian.AppendUint32(nil, v)) }

// nftMsg is an nftables notification of family (NFPROTO_*).
func nftMsg(msg uint16, flags uint16, family uint8, attrs ...[]byte) genl.Message {
	return genl.Message{Type: nfnlSubsysNFTables<<8 | msg, Flags: flags, Payload: append([]byte{family, 0, 0, 0}, slices.Concat(attrs...)...)}
}

// rule is a NEWRULE or DELRULE in table/chain; jumpTo, when set, gives it
// the expressions of `-j jumpTo`.
func rule(msg, flags uint16, family uint8, table, chain, jumpTo string) genl.Message {
	attrs := [][]byte{str(nftaRuleTable, table), str(nftaRuleChain, chain)}
	if jumpTo != "" {
		verdict := nest(nftaDataVerdict, be32(1, 0xfffffffd), str(nftaVerdictChain, jumpTo))
		attrs = append(attrs, nest(nftaRuleExprs,
			nest(nftaListElem, str(nftaExprName, "counter"), nest(nftaExprData, attr(1, make([]byte, 8)))),
			nest(nftaListElem, str(nftaExprName, "immediate"), nest(nftaExprData, be32(1, 0), nest(nftaImmediateData, verdict)))))
	}
	return nftMsg(msg, flags, family, attrs...)
}

func delRule(table, chain, jumpTo string) genl.Message {
	return rule(nftMsgDelRule, 0, nfprotoIPv4, table, chain, jumpTo)
}

func newGen(pid uint32, proc string) genl.Message {
	attrs := [][]byte{be32(1, 7)}
	if pid != 0 {
		attrs = append(attrs, be32(nftaGenProcPID, pid), str(nftaGenProcName, proc))
	}
	return nftMsg(nftMsgNewGen, 0, 0, attrs...)
}

func chainMsg(msg uint16, family uint8, table, chain string) genl.Message {
	return nftMsg(msg, 0, family, str(nftaChainTable, table), str(nftaChainName, chain))
}

// linkMsg is RTM_NEWLINK or RTM_DELLINK of a link.
func linkMsg(typ uint16, index int32, name string, up bool) genl.Message {
	b := make([]byte, ifinfomsgLen)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	if up {
		binary.NativeEndian.PutUint32(b[8:], iffUp)
	}
	return genl.Message{Type: typ, Payload: append(b, str(iflaIfname, name)...)}
}

// addrMsg is RTM_NEWADDR or RTM_DELADDR of an address on link index.
func addrMsg(typ uint16, index int32, a string) genl.Message {
	ip := netip.MustParseAddr(a)
	b := make([]byte, ifaddrmsgLen)
	b[0] = 2
	if ip.Is6() {
		b[0] = 10
	}
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	b = append(b, attr(ifaAddress, ip.AsSlice())...)
	if ip.Is4() {
		b = append(b, attr(ifaLocal, ip.AsSlice())...)
	}
	return genl.Message{Type: typ, Payload: b}
}

// datagram lays messages out as the kernel sends them in one datagram.
func datagram(ms ...genl.Message) []byte {
	var b []byte
	for _, m := range ms {
		h := make([]byte, genl.NetlinkHeaderLen)
		binary.NativeEndian.PutUint32(h, uint32(genl.NetlinkHeaderLen+len(m.Payload)))
		binary.NativeEndian.PutUint16(h[4:], m.Type)
		binary.NativeEndian.PutUint16(h[6:], m.Flags)
		b = append(append(b, h...), m.Payload...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	return b
}
