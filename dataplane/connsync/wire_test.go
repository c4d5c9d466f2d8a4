package connsync

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"
)

// TestAppendEntry checks each field of struct ip_vs_sync_v4 and
// ip_vs_sync_v6 (ip_vs_sync.c) at its offset, in network byte order.
func TestAppendEntry(t *testing.T) {
	v4 := entry{conn: Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:80"),
		Dest: ap("198.18.3.11:8080"), State: 1}, flags: 0x1103, fwmark: 0x01020304, timeout: 300}
	v6 := entry{conn: Conn{Protocol: ProtoUDP, Client: ap("[2001:2:0:1::b]:50000"), Virtual: ap("[2001:2:0:100::1]:53"),
		Dest: ap("[2001:2:0:3::c]:5353")}, flags: 0x0100}
	for _, tc := range []struct {
		name string
		e    entry
		want []byte
	}{
		{"IPv4", v4, join(
			[]byte{0, 6}, be16(36), // type, protocol, ver_size (version 0, 36 bytes)
			be32(0x1103), be16(1), // flags, state
			be16(40000), be16(80), be16(8080), // cport, vport, dport
			be32(0x01020304), be32(300), // fwmark, timeout
			[]byte{198, 18, 1, 11}, []byte{198, 18, 100, 1}, []byte{198, 18, 3, 11})},
		{"IPv6", v6, join(
			[]byte{1, 17}, be16(72),
			be32(0x0100), be16(0),
			be16(50000), be16(53), be16(5353),
			be32(0), be32(0),
			a16("2001:2:0:1::b"), a16("2001:2:0:100::1"), a16("2001:2:0:3::c"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := appendEntry([]byte{0xaa}, tc.e)
			if got[0] != 0xaa || !bytes.Equal(got[1:], tc.want) {
				t.Errorf("entry\n got % x\nwant % x", got[1:], tc.want)
			}
			if len(tc.want) != tc.e.len() {
				t.Errorf("%d bytes written, len() says %d", len(tc.want), tc.e.len())
			}
		})
	}
}

// TestMessageHeader checks struct ip_vs_sync_mesg: reserved 0, syncid,
// size of the whole message, the count, version 1, spare 0.
func TestMessageHeader(t *testing.T) {
	m := newMessage(42, 1472)
	if m.bytes() != nil {
		t.Error("an empty message has bytes")
	}
	e := entry{conn: Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80")}}
	m.add(e)
	m.add(e)
	b := m.bytes()
	want := join([]byte{0, 42}, be16(8+2*36), []byte{2, 1}, be16(0))
	if !bytes.Equal(b[:8], want) || len(b) != 80 {
		t.Errorf("header % x (%d bytes), want % x (80 bytes)", b[:8], len(b), want)
	}
	m.reset()
	m.add(e)
	if b := m.bytes(); len(b) != 44 || b[4] != 1 || binary.BigEndian.Uint16(b[2:]) != 44 {
		t.Errorf("after reset: % x", b)
	}
}

// TestMessageBounds: a message never exceeds its maximum length, nor 255
// entries (nr_conns is a byte).
func TestMessageBounds(t *testing.T) {
	e4 := entry{conn: Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:1"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80")}}
	e6 := entry{conn: Conn{Protocol: ProtoTCP, Client: ap("[2001:2::1]:1"), Virtual: ap("[2001:2::2]:80"), Dest: ap("[2001:2::3]:80")}}
	for _, tc := range []struct {
		name   string
		maxLen int
		e      entry
		fits   int
	}{
		{"IPv4 in 1472 bytes", 1472, e4, 40},
		{"IPv6 in 1472 bytes", 1472, e6, 20},
		{"IPv6 in 1452 bytes (IPv6 group)", 1452, e6, 20},
		{"IPv6 in 1447 bytes", 1447, e6, 19},
		{"IPv4 in 65507 bytes: 255 entries", 65507, e4, 255},
		{"IPv6 in 80 bytes", 80, e6, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMessage(1, tc.maxLen)
			n := 0
			for m.add(tc.e) {
				n++
			}
			if n != tc.fits || len(m.bytes()) > tc.maxLen {
				t.Errorf("%d entries in %d bytes, want %d in at most %d", n, len(m.bytes()), tc.fits, tc.maxLen)
			}
		})
	}
}

// wireConn is an entry as the receiver reads it.
type wireConn struct {
	typ, protocol       uint8
	flags               uint32
	state               uint16
	cport, vport, dport uint16
	fwmark, timeout     uint32
	caddr, vaddr, daddr netip.Addr
}

// decodeMessage reads a message as ip_vs_process_message and
// ip_vs_proc_sync_conn do, with their checks, for a backup of sync id
// backupID. Any check that would make the kernel drop something is an
// error here: lbd's messages must pass them all.
func decodeMessage(b []byte, backupID uint8) ([]wireConn, error) {
	switch {
	case len(b) < 4:
		return nil, errors.New("message header too short")
	case int(binary.BigEndian.Uint16(b[2:])) != len(b):
		return nil, fmt.Errorf("bogus message size %d for %d bytes", binary.BigEndian.Uint16(b[2:]), len(b))
	case backupID != 0 && b[1] != backupID:
		return nil, fmt.Errorf("syncid %d ignored", b[1])
	case len(b) < headerLen || b[5] != protoVersion || b[0] != 0 || b[6] != 0 || b[7] != 0:
		return nil, errors.New("read as a version 0 message")
	}
	var out []wireConn
	end := headerLen
	for i := 0; i < int(b[4]); i++ {
		p := end
		if p+entryLen4 > len(b) {
			return nil, fmt.Errorf("entry %d: too small", i)
		}
		vs := binary.BigEndian.Uint16(b[p+2:])
		size := int(vs & 0x0fff)
		if p+size > len(b) || vs>>12 != 0 {
			return nil, fmt.Errorf("entry %d: size %d past the message or version %d", i, size, vs>>12)
		}
		w, err := decodeEntry(b[p : p+size])
		if err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		out = append(out, w)
		end = p + (size+3)&^3
	}
	if end != len(b) {
		return nil, fmt.Errorf("%d bytes after the last entry", len(b)-end)
	}
	return out, nil
}

func decodeEntry(b []byte) (wireConn, error) {
	be := binary.BigEndian
	w := wireConn{typ: b[0], protocol: b[1], flags: be.Uint32(b[4:]), state: be.Uint16(b[8:]),
		cport: be.Uint16(b[10:]), vport: be.Uint16(b[12:]), dport: be.Uint16(b[14:]),
		fwmark: be.Uint32(b[16:]), timeout: be.Uint32(b[20:])}
	switch {
	case w.typ == typeInet6 && len(b) == entryLen6:
		w.caddr, w.vaddr, w.daddr = netip.AddrFrom16([16]byte(b[24:40])), netip.AddrFrom16([16]byte(b[40:56])), netip.AddrFrom16([16]byte(b[56:72]))
	case w.typ == 0 && len(b) == entryLen4:
		w.caddr, w.vaddr, w.daddr = netip.AddrFrom4([4]byte(b[24:28])), netip.AddrFrom4([4]byte(b[28:32])), netip.AddrFrom4([4]byte(b[32:36]))
	default:
		// The kernel reads options past the struct; lbd sends none.
		return wireConn{}, fmt.Errorf("type %d with %d bytes", w.typ, len(b))
	}
	return w, nil
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
func be16(v uint16) []byte        { return binary.BigEndian.AppendUint16(nil, v) }
func be32(v uint32) []byte        { return binary.BigEndian.AppendUint32(nil, v) }
func a16(s string) []byte         { b := netip.MustParseAddr(s).As16(); return b[:] }
