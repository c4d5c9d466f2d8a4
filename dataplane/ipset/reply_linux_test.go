package ipset

import (
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// message is one netlink message of a list reply: a set's attributes
// (after a 4-byte nfgenmsg), or NLMSG_DONE / NLMSG_ERROR with errno.
func message(typ, flags uint16, seq uint32, body []byte) []byte {
	m := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body)+3)
	binary.NativeEndian.PutUint32(m, uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(m[4:], typ)
	binary.NativeEndian.PutUint16(m[6:], flags)
	binary.NativeEndian.PutUint32(m[8:], seq)
	m = append(m, body...)
	for len(m)%4 != 0 {
		m = append(m, 0)
	}
	return m
}

func TestReplyDetectsInterruptedDump(t *testing.T) {
	const seq = 7
	list := uint16(nl.IPSET_CMD_LIST | unix.NFNL_SUBSYS_IPSET<<8)
	set := func(flags uint16) []byte {
		return message(list, unix.NLM_F_MULTI|flags, seq, []byte{0, 0, 0, 0, 1, 2, 3, 4})
	}
	done := func(flags uint16) []byte {
		return message(unix.NLMSG_DONE, unix.NLM_F_MULTI|flags, seq, []byte{0, 0, 0, 0})
	}
	enoent := make([]byte, 4)
	errno := -int32(syscall.ENOENT)
	binary.NativeEndian.PutUint32(enoent, uint32(errno))
	tests := []struct {
		name      string
		datagrams [][]byte
		wantSets  int
		wantErr   error
	}{
		{"a complete reply", [][]byte{append(set(0), set(0)...), done(0)}, 2, nil},
		{"flagged on a set's message", [][]byte{set(0), set(unix.NLM_F_DUMP_INTR), done(0)}, 2, genl.ErrDumpInterrupted},
		{"flagged on NLMSG_DONE only", [][]byte{set(0), done(unix.NLM_F_DUMP_INTR)}, 1, genl.ErrDumpInterrupted},
		{"another request's flag is not ours", [][]byte{append(message(list, unix.NLM_F_DUMP_INTR, seq-1, nil), set(0)...), done(0)}, 1, nil},
		{"an error beats the flag", [][]byte{set(unix.NLM_F_DUMP_INTR), message(unix.NLMSG_ERROR, 0, seq, enoent)}, 1, syscall.ENOENT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sets := 0
			r := reply{seq: seq, fn: func([]byte) error { sets++; return nil }}
			var err error
			ended := false
			for i, d := range tt.datagrams {
				if ended {
					t.Fatalf("reply ended before datagram %d", i)
				}
				ended, err = r.feed(d)
			}
			if !ended {
				t.Fatal("reply did not end")
			}
			if sets != tt.wantSets {
				t.Errorf("%d sets, want %d", sets, tt.wantSets)
			}
			if (err == nil) != (tt.wantErr == nil) || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
		})
	}
}
