package ipset

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// encodedData returns the IPSET_ATTR_DATA of the one request in b.
func encodedData(t *testing.T, b []byte) []byte {
	t.Helper()
	if len(b) < unix.NLMSG_HDRLEN+nl.SizeofNfgenmsg || int(binary.NativeEndian.Uint32(b)) != len(b) {
		t.Fatalf("not one request: % x", b)
	}
	for typ, v := range attrs(b[unix.NLMSG_HDRLEN+nl.SizeofNfgenmsg:]) {
		if typ&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_DATA {
			return v
		}
	}
	t.Fatalf("no IPSET_ATTR_DATA in % x", b)
	return nil
}

// TestEntryProtocols follows an entry of each protocol through what lbd
// does with it: its key and back (the applier's counts, and the entry a
// full sync deletes), the batch writer's request (IPSET_ATTR_PROTO, the
// IP protocol number) read back as a dump reads it, and vishvananda's
// entry. kube-proxy writes SCTP entries as "IP,sctp:PORT"; so does lbd.
func TestEntryProtocols(t *testing.T) {
	vip, rs := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.3.11")
	for _, tc := range []struct {
		set   string
		entry desired.SetEntry
		num   uint8
		text  string
	}{
		{"LBD-SERVICES", desired.SetEntry{IP: vip, Proto: lvs.TCP, Port: 80}, unix.IPPROTO_TCP, "198.18.100.1,tcp:80"},
		{"LBD-SERVICES", desired.SetEntry{IP: vip, Proto: lvs.UDP, Port: 53}, unix.IPPROTO_UDP, "198.18.100.1,udp:53"},
		{"LBD-SERVICES", desired.SetEntry{IP: vip, Proto: lvs.SCTP, Port: 2905}, unix.IPPROTO_SCTP, "198.18.100.1,sctp:2905"},
		{"LBD6-SERVICES", desired.SetEntry{IP: netip.MustParseAddr("2001:2::1"), Proto: lvs.SCTP, Port: 3868}, unix.IPPROTO_SCTP, "2001:2::1,sctp:3868"},
		{"LBD-LOOPBACK", desired.SetEntry{IP: rs, Proto: lvs.SCTP, Port: 2905, IP2: rs}, unix.IPPROTO_SCTP, "198.18.3.11,sctp:2905,198.18.3.11"},
		{"LBD-SRC-RANGES", desired.SetEntry{IP: vip, Proto: lvs.SCTP, Port: 2905, Net: netip.MustParsePrefix("198.18.1.0/24")}, unix.IPPROTO_SCTP,
			"198.18.100.1,sctp:2905,198.18.1.0/24"},
		{"LBD-FWMARK", desired.SetEntry{IP: vip, Proto: lvs.SCTP, Port: 2905, Mark: 7}, unix.IPPROTO_SCTP, "198.18.100.1,sctp:2905 skbmark 0x7"},
		// A protocol lbd does not serve (DCCP, in a foreign entry) keeps
		// its number: read back, it differs from every wanted entry.
		{"LBD-SERVICES", desired.SetEntry{IP: vip, Proto: "33", Port: 80}, 33, "198.18.100.1,33:80"},
	} {
		id, ok := setID(tc.set)
		if !ok {
			t.Fatalf("no set %s", tc.set)
		}
		if got := tc.entry.String(); got != tc.text {
			t.Errorf("%s entry prints %q, want %q", tc.set, got, tc.text)
		}
		k := toKey(desired.Member{Set: id, Entry: tc.entry})
		if k.proto != tc.num || k.entry() != tc.entry {
			t.Errorf("%s: key protocol %d, back %+v; want %d and %+v", tc.text, k.proto, k.entry(), tc.num, tc.entry)
		}
		var w batchWriter
		w.appendOp(&Op{Set: tc.set, Entry: tc.entry}, unix.NLM_F_REQUEST)
		data := encodedData(t, w.buf)
		var proto []byte
		for typ, v := range attrs(data) {
			if typ&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_PROTO {
				proto = v
			}
		}
		if len(proto) != 1 || proto[0] != tc.num {
			t.Errorf("%s: IPSET_ATTR_PROTO % x, want %d", tc.text, proto, tc.num)
		}
		if got, err := parseEntry(id.Spec().Type, data); err != nil || got != tc.entry {
			t.Errorf("%s: read back as %+v, %v", tc.text, got, err)
		}
		if n := toNetlink(tc.entry); n.Protocol == nil || *n.Protocol != tc.num {
			t.Errorf("%s: vishvananda entry's protocol %v, want %d", tc.text, n.Protocol, tc.num)
		}
	}
}
