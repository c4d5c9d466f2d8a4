package ipset

// Write: the cold sync's batch writer, as dataplane/ipvs/batch_linux.go is
// for IPVS. Instead of one synchronous vishvananda round trip per entry
// (build a request, send it, wait for its ack), it encodes many
// IPSET_CMD_ADD/DEL requests into one reused buffer and hands them to the
// kernel with one sendmsg. Only the last request of a send asks for an
// acknowledgement: the kernel answers every failed request anyway
// (netlink_rcv_skb acks when NLM_F_ACK is set or the request failed; ipset
// is not one of nfnetlink's batched subsystems), and a netlink sendmsg to
// the kernel runs the requests before it returns, so the error answers of a
// send are all queued before the last request's ack. The sequence number
// of an answer names the entry it belongs to.
//
// The requests are byte for byte what vishvananda/netlink v1.3.1's
// IpsetAdd/IpsetDel send for the IPSetEntry toNetlink makes
// (ipset_linux.go: ipsetAddDel, buildEntryData, encodeIP): NLM_F_EXCL (an
// existing entry, a missing one, is an error), the protocol and set name,
// and the entry's attributes nested in IPSET_ATTR_DATA in its order.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const (
	// batchPerSend is the most requests of one sendmsg. Measured in
	// TestWriteSpeed (200,000 adds): 64 to 1024 take the same time within
	// the noise (0.21-0.29 s), 16 about a third more; 256 keeps a send
	// under 40 KB.
	batchPerSend = 256
	// The socket's buffers hold a send (at most ~150 bytes a request) and
	// the answers of one in which every request failed (an skb each).
	batchRecvBuf = 4 << 20
	batchSendBuf = 1 << 20
	// batchAnswerWait bounds the wait for the answers to one send (the
	// kernel answers before sendmsg returns: this only guards a lost one).
	batchAnswerWait = 30 * time.Second
)

// batchWriter is Write's socket and its request buffer.
type batchWriter struct {
	s   *nfSocket // s.mu guards the writer
	seq uint32
	buf []byte
}

func openBatchWriter(ns netns.NsHandle) (*batchWriter, error) {
	s, err := openNFSocket(ns, "ipset-write")
	if err != nil {
		return nil, err
	}
	// Error answers without a copy of the request, and room for every
	// request of a send to fail (best effort: the defaults suffice for
	// batchPerSend).
	cerr := s.rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchRecvBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, batchRecvBuf)
		}
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchSendBuf) != nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, batchSendBuf)
		}
	})
	if cerr != nil {
		s.close()
		return nil, cerr
	}
	return &batchWriter{s: s}, nil
}

// Write adds or deletes each op's entry, batchPerSend requests a send, and
// returns one error per op: the kernel's, as Add and Del return it.
func (k *NetlinkKernel) Write(ops []Op) []error { return k.writeBatched(ops, batchPerSend) }

func (k *NetlinkKernel) writeBatched(ops []Op, perSend int) []error {
	errs := make([]error, len(ops))
	w := k.batch
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	for lo := 0; lo < len(ops); lo += perSend {
		hi := min(lo+perSend, len(ops))
		w.send(ops[lo:hi], errs[lo:hi])
	}
	return errs
}

// send hands ops to the kernel in one sendmsg, the last asking an ack, and
// records the errors it answers by sequence number.
func (w *batchWriter) send(ops []Op, errs []error) {
	w.buf = w.buf[:0]
	first := w.seq + 1
	for i := range ops {
		w.seq++
		flags := uint16(unix.NLM_F_REQUEST | unix.NLM_F_EXCL)
		if i == len(ops)-1 {
			flags |= unix.NLM_F_ACK
		}
		w.appendOp(&ops[i], flags)
	}
	fail := func(from int, err error) {
		for i := from; i < len(errs); i++ {
			errs[i] = err
		}
	}
	if err := w.s.send(w.buf); err != nil {
		fail(0, err)
		return
	}
	if err := w.s.f.SetReadDeadline(time.Now().Add(batchAnswerWait)); err != nil {
		fail(0, err)
		return
	}
	answered := 0 // ops before this one have a known outcome
	for answered < len(ops) {
		n, err := w.s.recv()
		if err != nil {
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded):
				err = fmt.Errorf("no answer from the kernel within %v", batchAnswerWait)
			case errors.Is(err, unix.ENOBUFS):
				err = fmt.Errorf("the kernel's answer was lost (netlink receive buffer overrun): %w", err)
			}
			fail(answered, err)
			return
		}
		for b := w.s.buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := binary.NativeEndian.Uint32(b)
			if l < unix.NLMSG_HDRLEN || int(l) > len(b) {
				fail(answered, fmt.Errorf("malformed netlink message (length %d of %d)", l, len(b)))
				return
			}
			typ, seq := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint32(b[8:])
			body := b[unix.NLMSG_HDRLEN:l]
			b = b[min(nlmAlign(int(l)), len(b)):]
			d := seq - first // wraps for an earlier send's answer
			if typ != unix.NLMSG_ERROR || d >= uint32(len(ops)) || int(d) < answered {
				continue
			}
			i := int(d)
			switch {
			case len(body) < 4:
				errs[i] = fmt.Errorf("short netlink error answer (%d bytes)", len(body))
			default:
				if errno := -int32(binary.NativeEndian.Uint32(body)); errno != 0 {
					errs[i] = ipsetErrno(errno)
				}
			}
			answered = i + 1 // answers come in order
		}
	}
}

// appendOp encodes one request as ipsetAddDel does.
func (w *batchWriter) appendOp(op *Op, flags uint16) {
	cmd := uint16(nl.IPSET_CMD_ADD)
	if op.Del {
		cmd = nl.IPSET_CMD_DEL
	}
	start := len(w.buf)
	var h [unix.NLMSG_HDRLEN + nl.SizeofNfgenmsg]byte
	binary.NativeEndian.PutUint16(h[4:], cmd|unix.NFNL_SUBSYS_IPSET<<8)
	binary.NativeEndian.PutUint16(h[6:], flags)
	binary.NativeEndian.PutUint32(h[8:], w.seq)
	h[unix.NLMSG_HDRLEN] = unix.AF_NETLINK // nfgenmsg: family, version 0, res_id 0
	w.buf = append(w.buf, h[:]...)
	w.attr(nl.IPSET_ATTR_PROTOCOL, nl.IPSET_PROTOCOL)
	name := w.beginAttr(nl.IPSET_ATTR_SETNAME)
	w.buf = append(w.buf, op.Set...)
	w.buf = append(w.buf, 0)
	w.endAttr(name)
	data := w.beginAttr(nl.IPSET_ATTR_DATA | nl.NLA_F_NESTED)
	e := op.Entry
	switch {
	case e.IP.IsValid():
		w.addr(nl.IPSET_ATTR_IP, e.IP)
		w.ports(e.IP2, e.Net, e.Port, protoNum(e.Proto))
		if e.Mark != 0 {
			w.skbmark(e.Mark)
		}
	case e.Net.IsValid(): // hash:net
		w.addr(nl.IPSET_ATTR_IP, e.Net.Addr())
		if b := e.Net.Bits(); b > 0 {
			w.attr(nl.IPSET_ATTR_CIDR, uint8(b))
		}
	}
	lineno := w.beginAttr(nl.IPSET_ATTR_LINENO | nl.NLA_F_NET_BYTEORDER)
	w.buf = append(w.buf, 0, 0, 0, 0)
	w.endAttr(lineno)
	w.endAttr(data)
	binary.NativeEndian.PutUint32(w.buf[start:], uint32(len(w.buf)-start))
}

// ports encodes what follows an entry's first address, in
// buildEntryData's order: the second address or network, then the
// protocol and port.
func (w *batchWriter) ports(ip2 netip.Addr, net netip.Prefix, port uint16, proto uint8) {
	switch {
	case ip2.IsValid():
		w.addr(nl.IPSET_ATTR_IP2, ip2)
	case net.IsValid(): // hash:ip,port,net
		w.addr(nl.IPSET_ATTR_IP2, net.Addr())
		if b := net.Bits(); b > 0 {
			w.attr(nl.IPSET_ATTR_CIDR2, uint8(b))
		}
	}
	if port != 0 {
		w.attr(nl.IPSET_ATTR_PROTO, proto)
		p := w.beginAttr(nl.IPSET_ATTR_PORT | nl.NLA_F_NET_BYTEORDER)
		w.buf = binary.BigEndian.AppendUint16(w.buf, port)
		w.endAttr(p)
	}
}

// skbmark encodes a skbinfo entry's mark as the ipset tool does for
// "skbmark MARK": one 64-bit attribute in network byte order, the mark
// in its upper half and its mask (all of the packet's mark) in the
// lower (ip_set_get_extensions).
func (w *batchWriter) skbmark(mark uint32) {
	a := w.beginAttr(nl.IPSET_ATTR_SKBMARK | nl.NLA_F_NET_BYTEORDER)
	w.buf = binary.BigEndian.AppendUint64(w.buf, uint64(mark)<<32|skbmarkFullMask)
	w.endAttr(a)
}

// skbmarkFullMask is the mask of lbd's marks: the whole packet mark.
const skbmarkFullMask = 0xffffffff

// addr encodes an address as encodeIP does: nested, IPv4 (also a mapped
// one) or IPv6, in network byte order.
func (w *batchWriter) addr(typ uint16, a netip.Addr) {
	nest := w.beginAttr(typ | nl.NLA_F_NESTED)
	if a.Is4() || a.Is4In6() {
		v := w.beginAttr(nl.IPSET_ATTR_IPADDR_IPV4 | nl.NLA_F_NET_BYTEORDER)
		b := a.Unmap().As4()
		w.buf = append(w.buf, b[:]...)
		w.endAttr(v)
	} else {
		v := w.beginAttr(nl.IPSET_ATTR_IPADDR_IPV6 | nl.NLA_F_NET_BYTEORDER)
		b := a.As16()
		w.buf = append(w.buf, b[:]...)
		w.endAttr(v)
	}
	w.endAttr(nest)
}

// attr appends a one-byte attribute.
func (w *batchWriter) attr(typ uint16, v uint8) {
	a := w.beginAttr(typ)
	w.buf = append(w.buf, v)
	w.endAttr(a)
}

func (w *batchWriter) beginAttr(typ uint16) int {
	start := len(w.buf)
	w.buf = binary.NativeEndian.AppendUint16(w.buf, 0)
	w.buf = binary.NativeEndian.AppendUint16(w.buf, typ)
	return start
}

// endAttr sets the attribute's length (without padding) and pads it.
func (w *batchWriter) endAttr(start int) {
	binary.NativeEndian.PutUint16(w.buf[start:], uint16(len(w.buf)-start))
	for len(w.buf)%unix.NLA_ALIGNTO != 0 {
		w.buf = append(w.buf, 0)
	}
}
