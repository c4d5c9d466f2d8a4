package ipset

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"net/netip"
	"os"
	"sync"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
)

// The dump speaks the ipset netlink protocol as vishvananda/netlink's
// ipset_linux.go does (protocol nl.IPSET_PROTOCOL, same attributes), but
// parses the replies in place: vishvananda's IpsetList copies every
// message and makes an IPSetEntry (net.IP slices, pointer fields) of each
// entry, 35 MB for lbd's 200,000 entries, only for lbd to throw them away.

// ipsetFlagListHeader asks IPSET_CMD_LIST for the sets' headers only
// (IPSET_FLAG_LIST_HEADER, linux/netfilter/ipset/ip_set.h; not in nl).
const ipsetFlagListHeader = 1 << 2

// dumpBufSize holds any one read of a dump: the kernel fills at most 32 KiB
// per read (SKB_WITH_OVERHEAD(32768) in netlink_recvmsg).
const dumpBufSize = 64 << 10

// nfSocket is a netfilter netlink socket of lbd's own (Dump's, Write's),
// read into one reused buffer.
type nfSocket struct {
	mu  sync.Mutex
	f   *os.File
	rc  syscall.RawConn
	buf []byte
}

// openNFSocket opens a socket in ns (netns.None(): the current one).
func openNFSocket(ns netns.NsHandle, name string) (*nfSocket, error) {
	// vishvananda knows how to open a socket in another namespace; take
	// over a duplicate of its descriptor (non-blocking, bound) to read it
	// with a buffer of our own.
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	fd, err := unix.FcntlInt(uintptr(s.GetFd()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &nfSocket{f: f, rc: rc, buf: make([]byte, dumpBufSize)}, nil
}

func (s *nfSocket) close() { s.f.Close() }

// Dump lists the headers of every set in one request (the kernel sends
// no entries), then the entries of each lbd set whose entries set wants,
// one request per set. A set destroyed in between is absent. A reply the
// kernel flags NLM_F_DUMP_INTR is read to its end, then Dump returns
// genl.ErrDumpInterrupted.
func (k *NetlinkKernel) Dump(set func(name string, t desired.SetType, family int) func(desired.SetEntry)) error {
	s := k.dump
	s.mu.Lock()
	defer s.mu.Unlock()
	type wanted struct {
		name  string
		t     desired.SetType
		entry func(desired.SetEntry)
	}
	var sets []wanted
	err := s.list("", func(msg []byte) error {
		var name, typ []byte
		family, skbinfo := 4, false
		for t, v := range attrs(msg) {
			switch t & nl.NLA_TYPE_MASK {
			case nl.IPSET_ATTR_SETNAME:
				name = v
			case nl.IPSET_ATTR_TYPENAME:
				typ = v
			case nl.IPSET_ATTR_FAMILY:
				if len(v) > 0 && v[0] == unix.AF_INET6 {
					family = 6
				}
			case nl.IPSET_ATTR_DATA:
				skbinfo = cadtFlags(v)&nl.IPSET_FLAG_WITH_SKBINFO != 0
			}
		}
		if n := nl.BytesToString(name); IsLBD(n) && len(typ) > 0 {
			t := desired.SetType(nl.BytesToString(typ))
			if skbinfo {
				t += skbinfoSuffix
			}
			if entry := set(n, t, family); entry != nil {
				sets = append(sets, wanted{n, t, entry})
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range sets {
		err := s.list(w.name, func(msg []byte) error {
			for t, v := range attrs(msg) {
				if t&nl.NLA_TYPE_MASK != nl.IPSET_ATTR_ADT {
					continue
				}
				for t, v := range attrs(v) {
					if t&nl.NLA_TYPE_MASK != nl.IPSET_ATTR_DATA {
						continue
					}
					e, err := parseEntry(w.t, v)
					if err != nil {
						return err
					}
					w.entry(e)
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, unix.ENOENT): // destroyed since
		case err != nil:
			return fmt.Errorf("ipset %s: %w", w.name, err)
		}
	}
	return nil
}

// list sends IPSET_CMD_LIST for one set (every set's header with name "")
// and calls fn with the attributes of each message of the reply. It reads
// the reply to its end even after fn failed: the socket takes no new dump
// before.
func (s *nfSocket) list(name string, fn func(msg []byte) error) error {
	req := nl.NewNetlinkRequest(nl.IPSET_CMD_LIST|unix.NFNL_SUBSYS_IPSET<<8, unix.NLM_F_DUMP)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_NETLINK, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_PROTOCOL, nl.Uint8Attr(nl.IPSET_PROTOCOL)))
	if name == "" {
		req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_FLAGS|int(nl.NLA_F_NET_BYTEORDER), nl.BEUint32Attr(ipsetFlagListHeader)))
	} else {
		req.AddData(nl.NewRtAttr(nl.IPSET_ATTR_SETNAME, nl.ZeroTerminated(name)))
	}
	if err := s.send(req.Serialize()); err != nil {
		return err
	}
	r := reply{seq: req.Seq, fn: fn}
	for {
		n, err := s.recv()
		if err != nil {
			return err
		}
		if done, err := r.feed(s.buf[:n]); done {
			return err
		}
	}
}

// reply follows the reply to one IPSET_CMD_LIST request across datagrams.
type reply struct {
	seq         uint32
	fn          func(msg []byte) error
	fnErr       error
	interrupted bool // a message was flagged NLM_F_DUMP_INTR
}

// feed takes one datagram of the reply; done says the reply ended (or
// cannot be followed), with its error.
func (r *reply) feed(b []byte) (done bool, err error) {
	for len(b) >= unix.NLMSG_HDRLEN {
		l := binary.NativeEndian.Uint32(b)
		if l < unix.NLMSG_HDRLEN || int(l) > len(b) {
			return true, fmt.Errorf("malformed netlink message (length %d of %d)", l, len(b))
		}
		typ, flags, seq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint16(b[6:]), binary.NativeEndian.Uint32(b[8:])
		body := b[unix.NLMSG_HDRLEN:l]
		b = b[min(nlmAlign(int(l)), len(b)):]
		if seq != r.seq {
			continue // the rest of an earlier request's reply
		}
		r.interrupted = r.interrupted || flags&unix.NLM_F_DUMP_INTR != 0
		switch typ {
		case unix.NLMSG_DONE, unix.NLMSG_ERROR:
			if len(body) >= 4 {
				if errno := -int32(binary.NativeEndian.Uint32(body)); errno != 0 {
					return true, ipsetErrno(errno)
				}
			}
			if r.interrupted && r.fnErr == nil {
				return true, genl.ErrDumpInterrupted
			}
			return true, r.fnErr
		case nl.IPSET_CMD_LIST | unix.NFNL_SUBSYS_IPSET<<8:
			if r.fnErr == nil && len(body) >= 4 { // after the nfgenmsg
				r.fnErr = r.fn(body[4:])
			}
		}
	}
	return false, nil
}

func ipsetErrno(errno int32) error {
	if errno >= nl.IPSET_ERR_PRIVATE {
		return nl.IPSetError(errno)
	}
	return syscall.Errno(errno)
}

func (s *nfSocket) send(b []byte) error {
	var err error
	werr := s.rc.Write(func(fd uintptr) bool {
		err = unix.Sendto(int(fd), b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return err != unix.EAGAIN
	})
	return cmpErr(werr, err)
}

func (s *nfSocket) recv() (int, error) {
	var n int
	var from unix.Sockaddr
	var err error
	rerr := s.rc.Read(func(fd uintptr) bool {
		n, from, err = unix.Recvfrom(int(fd), s.buf, unix.MSG_TRUNC)
		return err != unix.EAGAIN
	})
	if err := cmpErr(rerr, err); err != nil {
		return 0, err
	}
	if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
		return 0, fmt.Errorf("netlink message not from the kernel: %v", from)
	}
	if n > len(s.buf) {
		return 0, fmt.Errorf("netlink message of %d bytes, more than %d", n, len(s.buf))
	}
	return n, nil
}

func cmpErr(outer, inner error) error {
	if outer != nil {
		return outer
	}
	return inner
}

func nlmAlign(n int) int { return (n + unix.NLMSG_ALIGNTO - 1) &^ (unix.NLMSG_ALIGNTO - 1) }

// attrs walks netlink attributes: their type (with the nested and byte
// order flags) and payload. It stops at a malformed one.
func attrs(b []byte) iter.Seq2[uint16, []byte] {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= unix.SizeofNlAttr {
			l := int(binary.NativeEndian.Uint16(b))
			if l < unix.SizeofNlAttr || l > len(b) {
				return
			}
			if !yield(binary.NativeEndian.Uint16(b[2:]), b[unix.SizeofNlAttr:l]) {
				return
			}
			b = b[min((l+unix.NLA_ALIGNTO-1)&^(unix.NLA_ALIGNTO-1), len(b)):]
		}
	}
}

// addr reads an IPSET_ATTR_IP or IPSET_ATTR_IP2: nested, one
// IPSET_ATTR_IPADDR_IPV4 or _IPV6 in it.
func addr(t uint16, v []byte) netip.Addr {
	if t&nl.NLA_F_NESTED == 0 {
		a, _ := netip.AddrFromSlice(v)
		return a
	}
	for t, v := range attrs(v) {
		switch t & nl.NLA_TYPE_MASK {
		case nl.IPSET_ATTR_IPADDR_IPV4, nl.IPSET_ATTR_IPADDR_IPV6:
			a, _ := netip.AddrFromSlice(v)
			return a
		}
	}
	return netip.Addr{}
}

// cadtFlags reads IPSET_ATTR_CADT_FLAGS from a set header's
// IPSET_ATTR_DATA: the extensions the set was created with.
func cadtFlags(data []byte) uint32 {
	for t, v := range attrs(data) {
		if t&nl.NLA_TYPE_MASK == nl.IPSET_ATTR_CADT_FLAGS && len(v) >= 4 {
			return binary.BigEndian.Uint32(v)
		}
	}
	return 0
}

// parseEntry reads an entry's IPSET_ATTR_DATA as a set of type t holds it:
// addresses unmapped, a network without a prefix length a host's, a port
// with its protocol.
func parseEntry(t desired.SetType, b []byte) (desired.SetEntry, error) {
	var ip, ip2 netip.Addr
	var cidr, cidr2, proto uint8
	var port uint16
	var mark uint32
	var hasPort, hasProto bool
	for typ, v := range attrs(b) {
		switch typ & nl.NLA_TYPE_MASK {
		case nl.IPSET_ATTR_SKBMARK:
			// A mark with another mask is not lbd's: read as none, it
			// differs from what lbd wants, and is replaced.
			if len(v) >= 8 && binary.BigEndian.Uint64(v)&skbmarkFullMask == skbmarkFullMask {
				mark = uint32(binary.BigEndian.Uint64(v) >> 32)
			}
		case nl.IPSET_ATTR_IP:
			ip = addr(typ, v)
		case nl.IPSET_ATTR_IP2:
			ip2 = addr(typ, v)
		case nl.IPSET_ATTR_CIDR:
			if len(v) > 0 {
				cidr = v[0]
			}
		case nl.IPSET_ATTR_CIDR2:
			if len(v) > 0 {
				cidr2 = v[0]
			}
		case nl.IPSET_ATTR_PORT:
			if len(v) >= 2 {
				port, hasPort = binary.BigEndian.Uint16(v), true
			}
		case nl.IPSET_ATTR_PROTO:
			if len(v) > 0 {
				proto, hasProto = v[0], true
			}
		}
	}
	if !ip.IsValid() {
		return desired.SetEntry{}, fmt.Errorf("entry without an address: % x", b)
	}
	ip = ip.Unmap()
	prefix := func(a netip.Addr, bits uint8) netip.Prefix {
		if bits == 0 {
			return netip.PrefixFrom(a, a.BitLen())
		}
		return netip.PrefixFrom(a, int(bits))
	}
	var e desired.SetEntry
	switch t {
	case desired.HashNet:
		e.Net = prefix(ip, cidr)
		return e, nil
	case desired.HashIP:
		e.IP = ip
		return e, nil
	}
	e.IP, e.Mark = ip, mark
	if hasPort && hasProto {
		e.Port, e.Proto = port, entryProto(proto)
	}
	if ip2.IsValid() {
		switch ip2 = ip2.Unmap(); t {
		case desired.HashIPPortIP:
			e.IP2 = ip2
		case desired.HashIPPortNT:
			e.Net = prefix(ip2, cidr2)
		}
	}
	return e, nil
}
