package genl

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// le builds expected bytes: integers of 2 or 4 bytes in host order, byte
// slices and strings as they are.
func le(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case uint16:
			b = binary.NativeEndian.AppendUint16(b, v)
		case uint32:
			b = binary.NativeEndian.AppendUint32(b, v)
		case []byte:
			b = append(b, v...)
		case string:
			b = append(b, v...)
		default:
			panic(p)
		}
	}
	return b
}

func TestEncoderBytes(t *testing.T) {
	var e Encoder
	start := e.Begin(0x1234, nlmFRequest, 7, 5, 1)
	if start != 0 {
		t.Fatalf("first message at %d", start)
	}
	nest := e.BeginNested(2)
	e.U16(1, 0x0a0b)
	e.BE16(4, 8080)
	e.String(6, "wrr")
	e.Bytes(3, []byte{198, 18, 0, 1})
	e.U32(8, 300)
	e.String(7, "abcde")
	e.Bytes(10, nil)
	e.EndNested(nest)
	e.U32(11, 0xdeadbeef)
	e.End(start)
	second := e.Begin(0x1234, nlmFRequest, 8, 6, 1)
	e.End(second)
	e.AddLastFlags(nlmFAck)

	want := le(
		// message 1: nlmsghdr, genlmsghdr
		uint32(88), uint16(0x1234), uint16(nlmFRequest), uint32(7), uint32(0),
		[]byte{5, 1, 0, 0},
		// nested attribute 2: 4 + 5*8 + 12 + 4 = 60 bytes
		uint16(60), uint16(2),
		uint16(6), uint16(1), uint16(0x0a0b), []byte{0, 0}, // u16, padded
		uint16(6), uint16(4), []byte{0x1f, 0x90}, []byte{0, 0}, // be16, padded
		uint16(8), uint16(6), "wrr\x00", // string with its NUL, aligned
		uint16(8), uint16(3), []byte{198, 18, 0, 1},
		uint16(8), uint16(8), uint32(300),
		uint16(10), uint16(7), "abcde\x00", []byte{0, 0}, // padded to 12
		uint16(4), uint16(10), // empty value
		// after the nest, at the top level again
		uint16(8), uint16(11), uint32(0xdeadbeef),
		// message 2: only the last message has the added flag
		uint32(20), uint16(0x1234), uint16(nlmFRequest|nlmFAck), uint32(8), uint32(0),
		[]byte{6, 1, 0, 0},
	)
	if got := e.Encoded(); !bytes.Equal(got, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", got, want)
	}
	if second != 88 || second%4 != 0 {
		t.Errorf("second message at %d, want 88", second)
	}

	e.Reset()
	if len(e.Encoded()) != 0 {
		t.Fatalf("%d bytes after Reset", len(e.Encoded()))
	}
	s := e.Begin(1, 0, 1, 1, 1)
	e.End(s)
	e.AddLastFlags(nlmFAck)
	if got := native.Uint16(e.Encoded()[6:]); got != nlmFAck {
		t.Errorf("flags after Reset %#x, want %#x", got, nlmFAck)
	}
}

// TestEncoderAlignment checks that every attribute, whatever its length,
// leaves the buffer aligned, and that its length field excludes padding.
func TestEncoderAlignment(t *testing.T) {
	for n := range 9 {
		var e Encoder
		start := e.Begin(1, 0, 1, 1, 1)
		e.Bytes(1, bytes.Repeat([]byte{0xff}, n))
		e.String(2, string(bytes.Repeat([]byte{'x'}, n)))
		e.End(start)
		b := e.Encoded()
		if len(b)%4 != 0 || len(b) != NetlinkHeaderLen+HeaderLen+Align(4+n)+Align(4+n+1) {
			t.Errorf("%d-byte values: %d bytes", n, len(b))
		}
		var lens []int
		for m := range Messages(b) {
			for _, v := range Attrs(m.Payload[HeaderLen:]) {
				lens = append(lens, len(v))
			}
		}
		if len(lens) != 2 || lens[0] != n || lens[1] != n+1 {
			t.Errorf("%d-byte values decode as %v", n, lens)
		}
	}
}

// TestEncoderAllocs checks that encoding into a buffer that has grown
// allocates nothing, however long the strings.
func TestEncoderAllocs(t *testing.T) {
	var e Encoder
	addr := []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}
	long := string(bytes.Repeat([]byte{'s'}, 100))
	encode := func() {
		e.Reset()
		for seq := range uint32(64) {
			start := e.Begin(0x1234, nlmFRequest, seq, 1, 1)
			nest := e.BeginNested(1)
			e.U16(1, 10)
			e.Bytes(3, addr)
			e.BE16(4, 443)
			e.String(6, "wrr")
			e.String(7, long)
			e.U32(8, 300)
			e.EndNested(nest)
			e.End(start)
		}
		e.AddLastFlags(nlmFAck)
	}
	encode()
	if n := testing.AllocsPerRun(100, encode); n != 0 {
		t.Errorf("%v allocations per encoding, want 0", n)
	}
}
