package genl

import (
	"bytes"
	"syscall"
	"testing"
)

// errorAnswer is an NLMSG_ERROR message for request seq with error code
// code (negative errno, 0 for an ack) and a capped request header.
func errorAnswer(seq uint32, code int32) []byte {
	m := make([]byte, 16+20)
	native.PutUint32(m, uint32(len(m)))
	native.PutUint16(m[4:], nlmsgError)
	native.PutUint32(m[8:], seq)
	native.PutUint32(m[16:], uint32(code))
	return m
}

func TestAnswers(t *testing.T) {
	// Two answers in one buffer: an error (EEXIST) and an ack.
	var b []byte
	for _, a := range []struct {
		seq  uint32
		code int32
	}{{7, -int32(syscall.EEXIST)}, {9, 0}} {
		b = append(b, errorAnswer(a.seq, a.code)...)
	}
	var got []string
	var seqs []uint32
	for m := range Messages(b) {
		got = append(got, m.Errno().Error())
		seqs = append(seqs, m.Seq)
		if m.Type != nlmsgError {
			t.Errorf("type %d", m.Type)
		}
	}
	if len(got) != 2 || got[0] != syscall.EEXIST.Error() || got[1] != syscall.Errno(0).Error() {
		t.Errorf("answers: %q", got)
	}
	if len(seqs) != 2 || seqs[0] != 7 || seqs[1] != 9 {
		t.Errorf("sequence numbers %v, want [7 9]", seqs)
	}
	// A truncated message ends the iteration.
	n := 0
	for range Messages(b[:40]) {
		n++
	}
	if n != 1 {
		t.Errorf("%d messages in a truncated buffer, want 1", n)
	}
}

func TestErrno(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload []byte
		want    syscall.Errno
	}{
		{"ack", le(uint32(0)), 0},
		{"ENOENT", le(uint32(0xfffffffe)), syscall.ENOENT}, // -2
		{"EINVAL with request", le(uint32(0xffffffea), make([]byte, 16)), syscall.EINVAL},
		{"short", []byte{1, 2}, syscall.EBADMSG},
	} {
		if got := (Message{Type: nlmsgError, Payload: tc.payload}).Errno(); got != tc.want {
			t.Errorf("%s: Errno() = %d (%v), want %d (%v)", tc.name, got, got, tc.want, tc.want)
		}
	}
}

func TestMessages(t *testing.T) {
	var e Encoder
	for seq := uint32(1); seq <= 3; seq++ {
		s := e.Begin(0x20+uint16(seq), nlmFRequest, seq, uint8(seq), 2)
		e.U32(1, seq*100)
		e.End(s)
	}
	b := e.Encoded()
	var got []Message
	for m := range Messages(b) {
		got = append(got, m)
	}
	if len(got) != 3 {
		t.Fatalf("%d messages, want 3", len(got))
	}
	for i, m := range got {
		seq := uint32(i + 1)
		if m.Type != 0x20+uint16(seq) || m.Flags != nlmFRequest || m.Seq != seq ||
			!bytes.Equal(m.Payload, le([]byte{uint8(seq), 2, 0, 0}, uint16(8), uint16(1), seq*100)) {
			t.Errorf("message %d: %+v", i, m)
		}
	}
	// Stopping early.
	n := 0
	for range Messages(b) {
		n++
		break
	}
	if n != 1 {
		t.Errorf("break after %d messages", n)
	}
	// A length shorter than a header, or longer than what is left, ends
	// the iteration; so does a trailing partial header.
	bad := bytes.Clone(b)
	native.PutUint32(bad[28:], 8) // the second message's length
	if n := count(Messages(bad)); n != 1 {
		t.Errorf("%d messages before a short length, want 1", n)
	}
	native.PutUint32(bad[28:], 1000)
	if n := count(Messages(bad)); n != 1 {
		t.Errorf("%d messages before an overlong length, want 1", n)
	}
	if n := count(Messages(append(bytes.Clone(b), 1, 2, 3))); n != 3 {
		t.Errorf("%d messages before trailing bytes, want 3", n)
	}
}

func count(seq func(func(Message) bool)) int {
	n := 0
	for range seq {
		n++
	}
	return n
}

func countAttrs(b []byte) int {
	n := 0
	for range Attrs(b) {
		n++
	}
	return n
}

func TestAttrs(t *testing.T) {
	var e Encoder
	e.U16(1, 7)
	nest := e.BeginNested(2 | nlaFNested)
	e.String(1, "eth0")
	e.BE16(2, 8848)
	e.EndNested(nest)
	e.Bytes(3|nlaFNetByteorder, []byte{1, 2, 3, 4, 5})
	b := e.Encoded()

	type attr struct {
		typ uint16
		v   []byte
	}
	var top []attr
	for typ, v := range Attrs(b) {
		top = append(top, attr{typ, v})
	}
	if len(top) != 3 || top[0].typ != 1 || native.Uint16(top[0].v) != 7 || len(top[0].v) != 2 ||
		top[1].typ != 2 || top[2].typ != 3 || !bytes.Equal(top[2].v, []byte{1, 2, 3, 4, 5}) {
		t.Fatalf("top-level attributes %v", top)
	}
	var inner []attr
	for typ, v := range Attrs(top[1].v) {
		inner = append(inner, attr{typ, v})
	}
	if len(inner) != 2 || inner[0].typ != 1 || string(inner[0].v) != "eth0\x00" ||
		inner[1].typ != 2 || !bytes.Equal(inner[1].v, []byte{0x22, 0x90}) {
		t.Errorf("nested attributes %v", inner)
	}
	// A truncated attribute ends the iteration (its padding alone may
	// go).
	if n := countAttrs(b[:len(b)-3]); n != 3 {
		t.Errorf("%d attributes without the last padding, want 3", n)
	}
	n := 0
	for range Attrs(b[:len(b)-4]) {
		n++
	}
	if n != 2 {
		t.Errorf("%d attributes before a truncated one, want 2", n)
	}
	// A length below the header's ends it too (rather than looping).
	bad := bytes.Clone(b)
	native.PutUint16(bad[0:], 2)
	if n := countAttrs(bad); n != 0 {
		t.Errorf("%d attributes after a zero-length one, want 0", n)
	}
}

func TestDecodeAllocs(t *testing.T) {
	var e Encoder
	for seq := range uint32(32) {
		s := e.Begin(0x1234, nlmFRequest, seq, 1, 1)
		nest := e.BeginNested(1)
		e.U32(1, seq)
		e.String(2, "wlc")
		e.EndNested(nest)
		e.End(s)
	}
	b := e.Encoded()
	var sum uint32
	n := testing.AllocsPerRun(100, func() {
		for m := range Messages(b) {
			for _, v := range Attrs(m.Payload[HeaderLen:]) {
				for typ, w := range Attrs(v) {
					if typ == 1 {
						sum += native.Uint32(w)
					}
				}
			}
		}
	})
	if n != 0 {
		t.Errorf("%v allocations per decoding, want 0", n)
	}
}

func TestAlign(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 4, 3: 4, 4: 4, 5: 8, 17: 20, 20: 20} {
		if got := Align(n); got != want {
			t.Errorf("Align(%d) = %d, want %d", n, got, want)
		}
	}
}
