package syncd

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// TestEncodeStart checks the NEW_DAEMON request attribute by attribute:
// the kernel's layout (include/uapi/linux/ip_vs.h) and byte orders: the
// port in host order (the kernel htons it), an IPv4 group in network order.
func TestEncodeStart(t *testing.T) {
	ne := binary.NativeEndian
	u16 := func(v uint16) []byte { return ne.AppendUint16(nil, v) }
	u32 := func(v uint32) []byte { return ne.AppendUint32(nil, v) }
	g6 := netip.MustParseAddr("ff02::8:81").As16()
	for _, tc := range []struct {
		name string
		d    Daemon
		want map[uint16][]byte // attribute type -> value
	}{
		{"defaults left out", Daemon{Role: Master, Interface: "backend", SyncID: 7},
			map[uint16][]byte{1: u32(1), 2: []byte("backend\x00"), 3: u32(7)}},
		{"every setting", Daemon{Role: Backup, Interface: "eth0", SyncID: 255, MaxLen: 1200,
			Group: netip.MustParseAddr("239.18.0.1"), Port: 0x1234, TTL: 3},
			map[uint16][]byte{1: u32(2), 2: []byte("eth0\x00"), 3: u32(255), 4: u16(1200),
				5: {239, 18, 0, 1}, 7: u16(0x1234), 8: {3}}},
		{"IPv6 group", Daemon{Role: Master, Interface: "backend", Group: netip.MustParseAddr("ff02::8:81")},
			map[uint16][]byte{1: u32(1), 2: []byte("backend\x00"), 3: u32(0), 6: g6[:]}},
		{"IPv4-mapped group sent as IPv4", Daemon{Role: Master, Interface: "backend", Group: netip.MustParseAddr("::ffff:224.0.0.81")},
			map[uint16][]byte{1: u32(1), 2: []byte("backend\x00"), 3: u32(0), 5: {224, 0, 0, 81}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e genl.Encoder
			encodeStart(&e, 0x1d, 42, tc.d)
			msgs := 0
			for m := range genl.Messages(e.Encoded()) {
				msgs++
				if m.Type != 0x1d || m.Seq != 42 || m.Payload[0] != ipvsCmdNewDaemon || m.Payload[1] != ipvsGenlVersion {
					t.Errorf("header: type %#x seq %d cmd %d version %d", m.Type, m.Seq, m.Payload[0], m.Payload[1])
				}
				got := map[uint16][]byte{}
				for typ, v := range genl.Attrs(m.Payload[genl.HeaderLen:]) {
					if typ != ipvsCmdAttrDaemon {
						t.Errorf("top-level attribute %d", typ)
					}
					for typ, v := range genl.Attrs(v) {
						got[typ] = v
					}
				}
				if len(got) != len(tc.want) {
					t.Errorf("attributes %v, want %v", got, tc.want)
				}
				for typ, w := range tc.want {
					if !bytes.Equal(got[typ], w) {
						t.Errorf("attribute %d = %v, want %v", typ, got[typ], w)
					}
				}
			}
			if msgs != 1 {
				t.Errorf("%d messages, want 1", msgs)
			}
		})
	}
}

// TestDecodeDaemon reads dump messages laid out as the kernel's
// ip_vs_genl_fill_daemon writes them, encoded here with the request's
// encoder (the same attributes).
func TestDecodeDaemon(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    Daemon
		err  string
	}{
		{name: "IPv4", d: Daemon{Role: Master, Interface: "backend", SyncID: 7, MaxLen: 1472,
			Group: netip.MustParseAddr("224.0.0.81"), Port: 8848, TTL: 1}},
		{name: "IPv6", d: Daemon{Role: Backup, Interface: "frontend", SyncID: 200, MaxLen: 65487,
			Group: netip.MustParseAddr("ff02::8:81"), Port: 9000, TTL: 255}},
		{name: "a kernel before 4.3: no group, port, ttl, maxlen",
			d: Daemon{Role: Backup, Interface: "eth0", SyncID: 1}},
		{name: "unknown state", d: Daemon{Role: 4, Interface: "eth0"}, err: "unknown state 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e genl.Encoder
			encodeStart(&e, 0x1d, 1, tc.d)
			var got Daemon
			var err error
			for m := range genl.Messages(e.Encoded()) {
				got, err = decodeDaemonMessage(m.Payload)
			}
			checkErr(t, err, tc.err)
			if tc.err == "" && got != tc.d {
				t.Errorf("decoded %+v, want %+v", got, tc.d)
			}
		})
	}
	if _, err := decodeDaemonMessage([]byte{ipvsCmdNewDaemon, 1}); err == nil {
		t.Error("a short message decoded")
	}
	if _, err := decodeDaemonMessage([]byte{ipvsCmdNewDaemon, 1, 0, 0}); err == nil {
		t.Error("a message without a daemon decoded")
	}
}

// TestOpenWithoutIPVS: on a kernel without IPVS (this host's, usually),
// Open says so. The e2e tests (e2e/syncd_test.go) drive a real kernel.
func TestOpenWithoutIPVS(t *testing.T) {
	if _, err := os.Stat("/proc/net/ip_vs"); err == nil {
		t.Skip("this kernel has IPVS")
	}
	k, err := Open()
	if err == nil {
		k.Close()
		t.Fatal("Open succeeded without IPVS")
	}
	if !strings.Contains(err.Error(), "the kernel has no IPVS") {
		t.Errorf("error %q does not say IPVS is missing", err)
	}
}
