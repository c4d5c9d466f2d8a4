package genl

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
)

func TestEncodeGetFamily(t *testing.T) {
	var e Encoder
	encodeGetFamily(&e, 1, "IPVS")
	want := le(
		uint32(32), uint16(ctrlID), uint16(nlmFRequest|nlmFAck), uint32(1), uint32(0),
		[]byte{ctrlCmdGetFamily, ctrlVersion, 0, 0},
		uint16(9), uint16(ctrlAttrFamilyName), "IPVS\x00", []byte{0, 0, 0},
	)
	if got := e.Encoded(); !bytes.Equal(got, want) {
		t.Errorf("encoded\n% x\nwant\n% x", got, want)
	}
}

// familyReply is the controller's answer to request seq naming a family
// of id id (0: no id attribute), as the kernel lays it out: the name
// before the id, operations nested.
func familyReply(seq uint32, id uint16) []byte {
	var e Encoder
	s := e.Begin(ctrlID, 0, seq, 1 /* CTRL_CMD_NEWFAMILY */, 2)
	e.String(ctrlAttrFamilyName, "IPVS")
	if id != 0 {
		e.U16(ctrlAttrFamilyID, id)
	}
	e.U32(3 /* CTRL_ATTR_VERSION */, 1)
	ops := e.BeginNested(6 /* CTRL_ATTR_OPS */ | nlaFNested)
	e.U32(1, 1)
	e.EndNested(ops)
	e.End(s)
	return bytes.Clone(e.Encoded())
}

func TestFamilyAnswer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b       []byte
		id      uint16
		done    bool
		wantErr string
		errno   syscall.Errno
	}{
		{name: "reply", b: familyReply(1, 0x2a), id: 0x2a, done: true},
		{name: "other request's reply first", b: append(familyReply(7, 0x99), familyReply(1, 0x2a)...), id: 0x2a, done: true},
		{name: "other request's only", b: familyReply(7, 0x99)},
		{name: "unknown family", b: errorAnswer(1, -int32(syscall.ENOENT)), done: true,
			wantErr: syscall.ENOENT.Error(), errno: syscall.ENOENT},
		{name: "ack only", b: errorAnswer(1, 0), done: true, wantErr: "no answer"},
		{name: "no id", b: familyReply(1, 0), done: true, wantErr: "no id in the answer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, done, err := familyAnswer(tc.b, 1)
			if id != tc.id || done != tc.done {
				t.Errorf("id %#x done %v, want %#x %v", id, done, tc.id, tc.done)
			}
			if (err == nil) != (tc.wantErr == "") || err != nil && err.Error() != tc.wantErr {
				t.Errorf("error %v, want %q", err, tc.wantErr)
			}
			if tc.errno != 0 && !errors.Is(err, tc.errno) {
				t.Errorf("errors.Is(%v, %v) = false", err, tc.errno)
			}
		})
	}
}
