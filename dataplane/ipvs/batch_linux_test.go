package ipvs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/lvs"
)

// decoded is one request as the nl package reads it back.
type decoded struct {
	hdr  syscall.NlMsghdr
	cmd  uint8
	ver  uint8
	svc  map[uint16][]byte
	dest map[uint16][]byte
}

func decodeAll(t *testing.T, b []byte) []decoded {
	t.Helper()
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	var out []decoded
	for _, m := range msgs {
		d := decoded{hdr: m.Header, cmd: m.Data[0], ver: m.Data[1]}
		top, err := nl.ParseRouteAttr(m.Data[genl.HeaderLen:])
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range top {
			inner, err := nl.ParseRouteAttrAsMap(a.Value)
			if err != nil {
				t.Fatal(err)
			}
			vals := map[uint16][]byte{}
			for k, v := range inner {
				vals[k] = v.Value
			}
			switch a.Attr.Type {
			case ipvsCmdAttrService:
				d.svc = vals
			case ipvsCmdAttrDest:
				d.dest = vals
			default:
				t.Fatalf("unexpected top-level attribute %d", a.Attr.Type)
			}
		}
		out = append(out, d)
	}
	return out
}

func u16(b []byte) uint16 { return binary.NativeEndian.Uint16(b) }
func u32(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

func TestEncodeRequests(t *testing.T) {
	v4 := Service{
		Key:       lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Protocol: lvs.TCP},
		Scheduler: "wrr", Netmask: 0xffffffff,
		Dests: []Dest{{Addr: netip.MustParseAddrPort("10.0.0.1:8080"), Weight: 3}},
	}
	v6 := Service{
		Key:       lvs.Key{Addr: netip.MustParseAddr("2001:db8::10"), Port: 53, Protocol: lvs.UDP},
		Scheduler: "sh", Flags: desired.FlagPersistent | desired.FlagSched1, Timeout: 300, Netmask: 128,
		Dests: []Dest{{Addr: netip.MustParseAddrPort("[2001:db8:1::5]:5353"), Weight: 0}},
	}
	w := &batchWriter{family: 0x1234}
	w.appendService(&v4, syscall.NLM_F_REQUEST, 0)
	w.appendDest(&v4, 0, syscall.NLM_F_REQUEST, 0)
	w.appendService(&v6, syscall.NLM_F_REQUEST|syscall.NLM_F_ACK, 1)
	w.appendDest(&v6, 0, syscall.NLM_F_REQUEST, 1)
	if w.firstSeq != 1 || w.seq != 4 || len(w.sent) != 4 || w.sent[3] != (sentObj{svc: 1, dest: 0}) {
		t.Fatalf("bookkeeping: first %d last %d sent %v", w.firstSeq, w.seq, w.sent)
	}
	msgs := decodeAll(t, w.Encoded())
	if len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
	for i, m := range msgs {
		if m.hdr.Type != 0x1234 || m.hdr.Seq != uint32(i+1) || m.hdr.Flags&syscall.NLM_F_REQUEST == 0 || m.ver != ipvsGenlVersion {
			t.Errorf("message %d: header %+v version %d", i, m.hdr, m.ver)
		}
	}
	if msgs[2].hdr.Flags&syscall.NLM_F_ACK == 0 || msgs[0].hdr.Flags&syscall.NLM_F_ACK != 0 {
		t.Errorf("ack flags %#x %#x", msgs[0].hdr.Flags, msgs[2].hdr.Flags)
	}

	// IPv4 TCP service, full entry.
	s := msgs[0]
	if s.cmd != ipvsCmdNewService || s.dest != nil {
		t.Fatalf("message 0: cmd %d dest %v", s.cmd, s.dest)
	}
	if u16(s.svc[ipvsSvcAttrAddressFamily]) != syscall.AF_INET || u16(s.svc[ipvsSvcAttrProtocol]) != syscall.IPPROTO_TCP ||
		!bytes.Equal(s.svc[ipvsSvcAttrAddress], []byte{198, 18, 0, 1}) || !bytes.Equal(s.svc[ipvsSvcAttrPort], []byte{0, 80}) ||
		string(s.svc[ipvsSvcAttrSchedName]) != "wrr\x00" || u32(s.svc[ipvsSvcAttrFlags]) != 0 ||
		u32(s.svc[ipvsSvcAttrFlags][4:]) != 0xffffffff || u32(s.svc[ipvsSvcAttrTimeout]) != 0 || u32(s.svc[ipvsSvcAttrNetmask]) != 0xffffffff {
		t.Errorf("IPv4 service attributes: %v", s.svc)
	}
	// Its destination: the service key only, then the destination.
	d := msgs[1]
	if d.cmd != ipvsCmdNewDest || len(d.svc) != 4 {
		t.Fatalf("message 1: cmd %d service attributes %v", d.cmd, d.svc)
	}
	if !bytes.Equal(d.dest[ipvsDestAttrAddress], []byte{10, 0, 0, 1}) || !bytes.Equal(d.dest[ipvsDestAttrPort], []byte{0x1f, 0x90}) ||
		u32(d.dest[ipvsDestAttrForwardingMethod]) != ipvsConnFlagMasq || u32(d.dest[ipvsDestAttrWeight]) != 3 ||
		u32(d.dest[ipvsDestAttrUpperThreshold]) != 0 || u32(d.dest[ipvsDestAttrLowerThreshold]) != 0 ||
		u16(d.dest[ipvsDestAttrAddressFamily]) != syscall.AF_INET {
		t.Errorf("IPv4 destination attributes: %v", d.dest)
	}
	// IPv6 UDP persistent service.
	s = msgs[2]
	if u16(s.svc[ipvsSvcAttrAddressFamily]) != syscall.AF_INET6 || u16(s.svc[ipvsSvcAttrProtocol]) != syscall.IPPROTO_UDP ||
		!bytes.Equal(s.svc[ipvsSvcAttrAddress], netip.MustParseAddr("2001:db8::10").AsSlice()) ||
		!bytes.Equal(s.svc[ipvsSvcAttrPort], []byte{0, 53}) || string(s.svc[ipvsSvcAttrSchedName]) != "sh\x00" ||
		u32(s.svc[ipvsSvcAttrFlags]) != desired.FlagPersistent|desired.FlagSched1 || u32(s.svc[ipvsSvcAttrTimeout]) != 300 ||
		u32(s.svc[ipvsSvcAttrNetmask]) != 128 {
		t.Errorf("IPv6 service attributes: %v", s.svc)
	}
	d = msgs[3]
	if u16(d.svc[ipvsSvcAttrAddressFamily]) != syscall.AF_INET6 ||
		!bytes.Equal(d.dest[ipvsDestAttrAddress], netip.MustParseAddr("2001:db8:1::5").AsSlice()) ||
		!bytes.Equal(d.dest[ipvsDestAttrPort], []byte{0x14, 0xe9}) || u32(d.dest[ipvsDestAttrWeight]) != 0 ||
		u16(d.dest[ipvsDestAttrAddressFamily]) != syscall.AF_INET6 {
		t.Errorf("IPv6 destination attributes: svc %v dest %v", d.svc, d.dest)
	}
}

func TestRecordAnswer(t *testing.T) {
	svcs := []Service{{
		Key:       lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Protocol: lvs.TCP},
		Scheduler: "mh",
		Dests:     []Dest{{Addr: netip.MustParseAddrPort("10.0.0.1:8080"), Weight: 1}},
	}}
	const schedMsg = `scheduler "mh" is not available in the kernel: load module ip_vs_mh (modprobe ip_vs_mh)`
	for _, tc := range []struct {
		name      string
		obj       sentObj
		errno     syscall.Errno
		want      string // the recorded error's text
		wantSched bool   // whether it names the scheduler module
	}{
		{"service ENOENT", sentObj{svc: 0, dest: -1}, syscall.ENOENT,
			"adding virtual server 198.18.0.1:80/tcp: " + schedMsg + ": no such file or directory", true},
		{"service EEXIST", sentObj{svc: 0, dest: -1}, syscall.EEXIST,
			"adding virtual server 198.18.0.1:80/tcp: file exists", false},
		{"destination ENOENT", sentObj{svc: 0, dest: 0}, syscall.ENOENT,
			"adding real server 10.0.0.1:8080 to 198.18.0.1:80/tcp: no such file or directory", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, len(svcs))
			destErrs := make([][]error, len(svcs))
			recordAnswer(svcs, errs, destErrs, tc.obj, tc.errno)
			got := errs[0]
			if tc.obj.dest >= 0 {
				if errs[0] != nil || len(destErrs[0]) != 1 {
					t.Fatalf("service error %v, destination errors %v; want one destination error", errs[0], destErrs[0])
				}
				got = destErrs[0][0]
			}
			if got == nil || got.Error() != tc.want {
				t.Fatalf("recorded %v\nwant %s", got, tc.want)
			}
			if !errors.Is(got, tc.errno) {
				t.Errorf("errors.Is(%v, %v) = false", got, tc.errno)
			}
			if strings.Contains(got.Error(), "ip_vs_mh") != tc.wantSched {
				t.Errorf("%q: names the scheduler module = %v, want %v", got, !tc.wantSched, tc.wantSched)
			}
		})
	}
}

// TestEncodeProtocol checks that each protocol names its virtual server
// by its IP protocol number, in the service and in its destinations'
// requests.
func TestEncodeProtocol(t *testing.T) {
	for _, tc := range []struct {
		proto lvs.Protocol
		num   uint16
	}{{lvs.TCP, syscall.IPPROTO_TCP}, {lvs.UDP, syscall.IPPROTO_UDP}, {lvs.SCTP, 132}} {
		s := Service{Key: lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 2905, Protocol: tc.proto}, Scheduler: "rr",
			Dests: []Dest{{Addr: netip.MustParseAddrPort("198.18.3.11:2905"), Weight: 1, Forward: lvs.Forward{Method: lvs.DR}}}}
		w := &batchWriter{family: 0x1234}
		w.appendService(&s, syscall.NLM_F_REQUEST, 0)
		w.appendDest(&s, 0, syscall.NLM_F_REQUEST, 0)
		for i, m := range decodeAll(t, w.Encoded()) {
			if got := u16(m.svc[ipvsSvcAttrProtocol]); got != tc.num || !bytes.Equal(m.svc[ipvsSvcAttrPort], []byte{0x0b, 0x59}) {
				t.Errorf("%s message %d: protocol %d port % x; want %d and 0b 59", tc.proto, i, got, m.svc[ipvsSvcAttrPort], tc.num)
			}
		}
	}
}

// TestEncodeFWMarkService checks that a firewall-mark virtual server is
// named by its family and mark alone, as the kernel expects.
func TestEncodeFWMarkService(t *testing.T) {
	for _, tc := range []struct {
		family lvs.Family
		af     uint16
	}{{lvs.IPv4, syscall.AF_INET}, {lvs.IPv6, syscall.AF_INET6}} {
		s := Service{Key: lvs.FWMarkKey(7, tc.family), Scheduler: "rr",
			Dests: []Dest{{Addr: netip.MustParseAddrPort("198.18.1.1:0"), Weight: 1}}}
		w := &batchWriter{family: 0x1234}
		w.appendService(&s, syscall.NLM_F_REQUEST, 0)
		w.appendDest(&s, 0, syscall.NLM_F_REQUEST, 0)
		for i, m := range decodeAll(t, w.Encoded()) {
			if u16(m.svc[ipvsSvcAttrAddressFamily]) != tc.af || u32(m.svc[ipvsSvcAttrFWMark]) != 7 {
				t.Errorf("%v message %d: service attributes %v; want family %d and mark 7", tc.family, i, m.svc, tc.af)
			}
			for _, attr := range []uint16{ipvsSvcAttrAddress, ipvsSvcAttrPort, ipvsSvcAttrProtocol} {
				if _, ok := m.svc[attr]; ok {
					t.Errorf("%v message %d: service attribute %d sent with a mark", tc.family, i, attr)
				}
			}
		}
	}
}

// TestEncodeForward checks the forwarding method and tunnel attributes of
// a destination.
func TestEncodeForward(t *testing.T) {
	for _, tc := range []struct {
		fwd    lvs.Forward
		method uint32
		tunnel bool
	}{
		{lvs.Forward{}, ipvsConnFlagMasq, false},
		{lvs.Forward{Method: lvs.DR}, ipvsConnFlagDRoute, false},
		{lvs.Forward{Method: lvs.Tunnel}, ipvsConnFlagTunnel, true},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080, Checksum: lvs.RemoteChecksum}, ipvsConnFlagTunnel, true},
	} {
		s := Service{Key: lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Protocol: lvs.TCP},
			Dests: []Dest{{Addr: netip.MustParseAddrPort("198.19.0.1:80"), Weight: 1, Forward: tc.fwd}}}
		w := &batchWriter{family: 0x1234}
		w.appendDest(&s, 0, syscall.NLM_F_REQUEST, 0)
		d := decodeAll(t, w.Encoded())[0].dest
		if got := u32(d[ipvsDestAttrForwardingMethod]); got != tc.method {
			t.Errorf("%v: method %d, want %d", tc.fwd, got, tc.method)
		}
		_, hasType := d[ipvsDestAttrTunType]
		if hasType != tc.tunnel {
			t.Errorf("%v: tunnel attributes sent = %v, want %v", tc.fwd, hasType, tc.tunnel)
		}
		if tc.tunnel && (d[ipvsDestAttrTunType][0] != uint8(tc.fwd.Tunnel) ||
			!bytes.Equal(d[ipvsDestAttrTunPort], binary.BigEndian.AppendUint16(nil, tc.fwd.Port)) ||
			u16(d[ipvsDestAttrTunFlags]) != uint16(tc.fwd.Checksum)) {
			t.Errorf("%v: tunnel attributes %v", tc.fwd, d)
		}
	}
}
