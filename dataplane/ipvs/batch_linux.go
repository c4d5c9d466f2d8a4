package ipvs

// AddServices: the cold path's batch writer. Instead of one synchronous
// moby/ipvs round trip per object (send, getsockname, wait for the ack,
// zero a 64 KiB buffer, parse), it encodes many IPVS generic-netlink
// requests into one buffer and hands them to the kernel with one sendmsg.
// Only the last request of a send asks for an acknowledgement: the kernel
// answers every failed request anyway (netlink_rcv_skb acks when
// NLM_F_ACK is set or the request failed), and a netlink sendmsg to the
// kernel runs the requests before it returns, so the error answers of a
// send are all queued before the last request's ack. The sequence number
// of an answer names the object it belongs to.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbdproject/lbd/lvs"
	"golang.org/x/sys/unix"
)

// Generic netlink and IPVS numbers, from include/uapi/linux/genetlink.h and
// include/uapi/linux/ip_vs.h, as github.com/moby/ipvs v1.1.0 names them in
// constants_linux.go (Apache-2.0) and lays them out in netlink_linux.go.
const (
	genlCtrlID             = 0x10 // GENL_ID_CTRL
	genlCtrlCmdGetFamily   = 3
	genlCtrlAttrFamilyID   = 1
	genlCtrlAttrFamilyName = 2
	genlHdrLen             = 4 // struct genlmsghdr: cmd, version, reserved

	ipvsGenlName    = "IPVS"
	ipvsGenlVersion = 1

	ipvsCmdNewService = 1
	ipvsCmdNewDest    = 5

	ipvsCmdAttrService = 1
	ipvsCmdAttrDest    = 2

	ipvsSvcAttrAddressFamily = 1 // u16
	ipvsSvcAttrProtocol      = 2 // u16
	ipvsSvcAttrAddress       = 3 // 4 or 16 bytes
	ipvsSvcAttrPort          = 4 // be16
	ipvsSvcAttrSchedName     = 6 // NUL-terminated
	ipvsSvcAttrFlags         = 7 // struct ip_vs_flags {flags, mask u32}
	ipvsSvcAttrTimeout       = 8 // u32
	ipvsSvcAttrNetmask       = 9 // u32 (a prefix length for IPv6)

	ipvsDestAttrAddress          = 1  // 4 or 16 bytes
	ipvsDestAttrPort             = 2  // be16
	ipvsDestAttrForwardingMethod = 3  // u32
	ipvsDestAttrWeight           = 4  // u32
	ipvsDestAttrUpperThreshold   = 5  // u32
	ipvsDestAttrLowerThreshold   = 6  // u32
	ipvsDestAttrAddressFamily    = 11 // u16

	ipvsConnFlagMasq = 0 // IP_VS_CONN_F_MASQ
)

// BatchOptions tune AddServicesWith. Zero fields take the defaults, which
// are what AddServices uses (measured in e2e/ipvsbatch_test.go).
type BatchOptions struct {
	// Workers is the number of goroutines, each with its own netlink
	// socket, that share the services (in chunks of PerSend).
	Workers int
	// PerSend is the most requests handed to the kernel in one sendmsg.
	PerSend int
	// AckEach asks an acknowledgement of every request rather than only
	// of the last of each send (errors are answered either way).
	AckEach bool
}

const (
	defaultBatchWorkers = 1
	defaultBatchPerSend = 128
	// maxBatchPerSend keeps the answers of one send (every request may
	// fail) inside the socket's receive buffer, and the send inside its
	// send buffer (about 120 bytes a request).
	maxBatchPerSend = 1024
	batchRecvBuf    = 4 << 20
	batchSendBuf    = 1 << 20
	// batchAnswerWait bounds the wait for the kernel's answers to one send
	// (it answers before sendmsg returns; this only guards a lost answer).
	batchAnswerWait = 30 * time.Second
)

func (o BatchOptions) withDefaults() BatchOptions {
	if o.Workers <= 0 {
		o.Workers = defaultBatchWorkers
	}
	if o.PerSend <= 0 {
		o.PerSend = defaultBatchPerSend
	}
	o.PerSend = min(o.PerSend, maxBatchPerSend)
	return o
}

// AddServices creates each service and all of its destinations (s.Dests,
// weights as given, always masquerading) and returns one error per service
// (nil when the service and every destination were created). Services are
// independent: an error in one does not stop the others. Destinations of one
// service are created after the service, in order; when the service cannot
// be created (it exists already, say), none of its destinations is sent.
func (k *NetlinkKernel) AddServices(svcs []Service) []error {
	return k.AddServicesWith(svcs, BatchOptions{})
}

// AddServicesWith is AddServices with explicit batching options, for
// measuring them.
func (k *NetlinkKernel) AddServicesWith(svcs []Service, o BatchOptions) []error {
	errs := make([]error, len(svcs))
	if len(svcs) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for i, s := range svcs {
			errs[i] = fmt.Errorf("adding virtual server %s: %w", s.Key, err)
		}
		return errs
	}
	family, err := k.ipvsFamily()
	if err != nil {
		return fail(err)
	}
	o = o.withDefaults()
	chunks := (len(svcs) + o.PerSend - 1) / o.PerSend
	workers := min(o.Workers, chunks)
	writers := make([]*genlWriter, 0, workers)
	defer func() {
		for _, w := range writers {
			w.close()
		}
	}()
	for range workers {
		w, err := newGenlWriter(family)
		if err != nil {
			if len(writers) == 0 {
				return fail(err)
			}
			break // fewer workers
		}
		writers = append(writers, w)
	}
	var next atomic.Int64
	run := func(w *genlWriter) {
		for {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			lo := c * o.PerSend
			hi := min(lo+o.PerSend, len(svcs))
			w.addChunk(svcs[lo:hi], errs[lo:hi], o)
		}
	}
	if len(writers) == 1 {
		run(writers[0])
		return errs
	}
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { run(w) })
	}
	wg.Wait()
	return errs
}

// ipvsFamily returns the IPVS generic-netlink family id, asking the kernel
// once.
func (k *NetlinkKernel) ipvsFamily() (uint16, error) {
	k.familyOnce.Do(func() { k.family, k.familyErr = resolveGenlFamily(ipvsGenlName) })
	return k.family, k.familyErr
}

func resolveGenlFamily(name string) (uint16, error) {
	w, err := newGenlWriter(genlCtrlID)
	if err != nil {
		return 0, err
	}
	defer w.close()
	w.seq++
	start := w.begin(genlCtrlID, unix.NLM_F_REQUEST|unix.NLM_F_ACK, w.seq, genlCtrlCmdGetFamily)
	w.attrString(genlCtrlAttrFamilyName, name)
	w.end(start)
	if err := w.send(); err != nil {
		return 0, fmt.Errorf("looking up the %s generic netlink family: %w", name, err)
	}
	var id uint16
	found := false
	for !found {
		n, err := w.recv()
		if err != nil {
			return 0, fmt.Errorf("looking up the %s generic netlink family: %w", name, err)
		}
		for m := range nlMessages(w.rbuf[:n]) {
			if m.seq != w.seq {
				continue
			}
			if m.typ == unix.NLMSG_ERROR {
				if e := m.errno(); e != 0 {
					return 0, fmt.Errorf("looking up the %s generic netlink family: %w", name, e)
				}
				return 0, fmt.Errorf("looking up the %s generic netlink family: no answer", name)
			}
			if len(m.payload) < genlHdrLen {
				continue
			}
			for typ, v := range nlAttrs(m.payload[genlHdrLen:]) {
				if typ == genlCtrlAttrFamilyID && len(v) >= 2 {
					id, found = nativeEndian.Uint16(v), true
				}
			}
			if !found {
				return 0, fmt.Errorf("looking up the %s generic netlink family: no id in the answer", name)
			}
		}
	}
	return id, nil
}

// genlWriter is one generic-netlink socket with its buffers.
type genlWriter struct {
	fd     int
	family uint16
	seq    uint32
	buf    []byte // requests of the current send
	rbuf   []byte // one answer datagram
	// what each request of the current send was: the service's index in
	// the chunk and the destination's index in it (-1: the service).
	sent []sentObj
	// firstSeq is the sequence number of sent[0].
	firstSeq uint32
	// lastMsg is the offset of the last request in buf.
	lastMsg int
}

type sentObj struct{ svc, dest int }

var nativeEndian = binary.NativeEndian

func newGenlWriter(family uint16) (*genlWriter, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening a generic netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a generic netlink socket: %w", err)
	}
	// Error answers without a copy of the request, and room for every
	// request of a send to fail (best effort: the defaults suffice for the
	// default PerSend).
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchRecvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, batchRecvBuf)
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchSendBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, batchSendBuf)
	}
	tv := unix.NsecToTimeval(batchAnswerWait.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("setting a generic netlink socket's receive timeout: %w", err)
	}
	return &genlWriter{fd: fd, family: family, rbuf: make([]byte, 64<<10)}, nil
}

func (w *genlWriter) close() { unix.Close(w.fd) }

// addChunk creates the services of one chunk: one or more sends of the
// services, then sends of the destinations of those the kernel created.
func (w *genlWriter) addChunk(svcs []Service, errs []error, o BatchOptions) {
	destErrs := make([][]error, len(svcs))
	flags := uint16(unix.NLM_F_REQUEST)
	if o.AckEach {
		flags |= unix.NLM_F_ACK
	}
	for i := range svcs {
		w.appendService(&svcs[i], flags, i)
		if len(w.sent) == o.PerSend {
			w.flush(svcs, errs, destErrs)
		}
	}
	w.flush(svcs, errs, destErrs)
	for i := range svcs {
		if errs[i] != nil {
			continue
		}
		for j := range svcs[i].Dests {
			w.appendDest(&svcs[i], j, flags, i)
			if len(w.sent) == o.PerSend {
				w.flush(svcs, errs, destErrs)
			}
		}
	}
	w.flush(svcs, errs, destErrs)
	for i, de := range destErrs {
		if len(de) > 0 {
			errs[i] = errors.Join(de...)
		}
	}
}

func (w *genlWriter) appendService(s *Service, flags uint16, idx int) {
	w.seq++
	if len(w.sent) == 0 {
		w.firstSeq = w.seq
	}
	w.sent = append(w.sent, sentObj{svc: idx, dest: -1})
	encodeNewService(w, s, flags)
}

func (w *genlWriter) appendDest(s *Service, j int, flags uint16, idx int) {
	w.seq++
	if len(w.sent) == 0 {
		w.firstSeq = w.seq
	}
	w.sent = append(w.sent, sentObj{svc: idx, dest: j})
	encodeNewDest(w, s, &s.Dests[j], flags)
}

func encodeNewService(w *genlWriter, s *Service, flags uint16) {
	start := w.begin(w.family, flags, w.seq, ipvsCmdNewService)
	nest := w.beginAttr(ipvsCmdAttrService)
	w.serviceKey(s)
	w.attrString(ipvsSvcAttrSchedName, s.Scheduler)
	var f [8]byte
	nativeEndian.PutUint32(f[0:], s.Flags)
	nativeEndian.PutUint32(f[4:], 0xffffffff) // mask: set every flag as given
	w.attr(ipvsSvcAttrFlags, f[:])
	w.attrU32(ipvsSvcAttrTimeout, s.Timeout)
	w.attrU32(ipvsSvcAttrNetmask, s.Netmask)
	w.endAttr(nest)
	w.end(start)
}

func encodeNewDest(w *genlWriter, s *Service, d *Dest, flags uint16) {
	start := w.begin(w.family, flags, w.seq, ipvsCmdNewDest)
	nest := w.beginAttr(ipvsCmdAttrService)
	w.serviceKey(s)
	w.endAttr(nest)
	nest = w.beginAttr(ipvsCmdAttrDest)
	a := d.Addr.Addr()
	af := uint16(unix.AF_INET)
	if a.Is6() && !a.Is4In6() {
		af = unix.AF_INET6
		b := a.As16()
		w.attr(ipvsDestAttrAddress, b[:])
	} else {
		b := a.Unmap().As4()
		w.attr(ipvsDestAttrAddress, b[:])
	}
	w.attrBE16(ipvsDestAttrPort, d.Addr.Port())
	w.attrU32(ipvsDestAttrForwardingMethod, ipvsConnFlagMasq)
	w.attrU32(ipvsDestAttrWeight, uint32(d.Weight))
	w.attrU32(ipvsDestAttrUpperThreshold, 0)
	w.attrU32(ipvsDestAttrLowerThreshold, 0)
	w.attrU16(ipvsDestAttrAddressFamily, af)
	w.endAttr(nest)
	w.end(start)
}

// serviceKey writes the attributes that name a virtual server.
func (w *genlWriter) serviceKey(s *Service) {
	a := s.Key.Addr
	if a.Is6() && !a.Is4In6() {
		w.attrU16(ipvsSvcAttrAddressFamily, unix.AF_INET6)
	} else {
		w.attrU16(ipvsSvcAttrAddressFamily, unix.AF_INET)
	}
	proto := uint16(unix.IPPROTO_TCP)
	if s.Key.Protocol == lvs.UDP {
		proto = unix.IPPROTO_UDP
	}
	w.attrU16(ipvsSvcAttrProtocol, proto)
	if a.Is6() && !a.Is4In6() {
		b := a.As16()
		w.attr(ipvsSvcAttrAddress, b[:])
	} else {
		b := a.Unmap().As4()
		w.attr(ipvsSvcAttrAddress, b[:])
	}
	w.attrBE16(ipvsSvcAttrPort, s.Key.Port)
}

// flush sends the pending requests with the last one asking an ack, and
// records the errors the kernel answers, by sequence number.
func (w *genlWriter) flush(svcs []Service, errs []error, destErrs [][]error) {
	if len(w.sent) == 0 {
		return
	}
	defer func() { w.buf, w.sent = w.buf[:0], w.sent[:0] }()
	// Ask the last request's ack: when it arrives, every answer of the
	// send has.
	lastHdr := w.lastMsg
	flags := nativeEndian.Uint16(w.buf[lastHdr+6:])
	nativeEndian.PutUint16(w.buf[lastHdr+6:], flags|unix.NLM_F_ACK)
	lastSeq := w.seq
	record := func(obj sentObj, err error) { recordErr(svcs, errs, destErrs, obj, err) }
	if err := w.send(); err != nil {
		for _, obj := range w.sent {
			record(obj, err)
		}
		return
	}
	answered := 0 // requests up to this one have a known outcome
	for answered < len(w.sent) {
		n, err := w.recv()
		if err != nil {
			if errors.Is(err, unix.EAGAIN) {
				err = fmt.Errorf("no answer from the kernel within %v", batchAnswerWait)
			} else if errors.Is(err, unix.ENOBUFS) {
				err = fmt.Errorf("the kernel's answer was lost (netlink receive buffer overrun): %w", err)
			}
			for _, obj := range w.sent[answered:] {
				record(obj, err)
			}
			return
		}
		for m := range nlMessages(w.rbuf[:n]) {
			if m.typ != unix.NLMSG_ERROR {
				continue
			}
			i := int(m.seq - w.firstSeq)
			if i < answered || i >= len(w.sent) {
				continue // an answer of an earlier send
			}
			if e := m.errno(); e != 0 {
				recordAnswer(svcs, errs, destErrs, w.sent[i], e)
			}
			answered = i + 1 // answers come in order
			if m.seq == lastSeq {
				answered = len(w.sent)
			}
		}
	}
}

// recordErr records err, the outcome of request obj, against its service.
func recordErr(svcs []Service, errs []error, destErrs [][]error, obj sentObj, err error) {
	s := &svcs[obj.svc]
	if obj.dest < 0 {
		errs[obj.svc] = fmt.Errorf("adding virtual server %s: %w", s.Key, err)
		return
	}
	destErrs[obj.svc] = append(destErrs[obj.svc],
		fmt.Errorf("adding real server %s to %s: %w", s.Dests[obj.dest].Addr, s.Key, err))
}

// recordAnswer records the kernel's error answer e to request obj. Only
// a service's ENOENT means a missing scheduler module; a destination's
// means something else.
func recordAnswer(svcs []Service, errs []error, destErrs [][]error, obj sentObj, e syscall.Errno) {
	var err error = e
	if obj.dest < 0 {
		// Its destinations are sent only once it exists: nothing of it
		// was created.
		err = Refusal(schedulerError(svcs[obj.svc].Scheduler, e))
	}
	recordErr(svcs, errs, destErrs, obj, err)
}

func (w *genlWriter) send() error {
	for {
		err := unix.Sendto(w.fd, w.buf, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

func (w *genlWriter) recv() (int, error) {
	for {
		n, _, err := unix.Recvfrom(w.fd, w.rbuf, 0)
		if err == unix.EINTR {
			continue
		}
		if err == nil && n < unix.NLMSG_HDRLEN {
			return 0, fmt.Errorf("short netlink answer (%d bytes)", n)
		}
		return n, err
	}
}

// Encoding. Requests are appended to w.buf; begin/end and beginAttr/endAttr
// fill in the lengths.

func (w *genlWriter) begin(typ, flags uint16, seq uint32, cmd uint8) int {
	start := len(w.buf)
	w.lastMsg = start
	var h [unix.NLMSG_HDRLEN + genlHdrLen]byte
	nativeEndian.PutUint16(h[4:], typ)
	nativeEndian.PutUint16(h[6:], flags)
	nativeEndian.PutUint32(h[8:], seq)
	h[16] = cmd
	h[17] = ipvsGenlVersion
	w.buf = append(w.buf, h[:]...)
	return start
}

func (w *genlWriter) end(start int) {
	nativeEndian.PutUint32(w.buf[start:], uint32(len(w.buf)-start))
}

func (w *genlWriter) beginAttr(typ uint16) int {
	start := len(w.buf)
	w.buf = append(w.buf, 0, 0, 0, 0)
	nativeEndian.PutUint16(w.buf[start+2:], typ)
	return start
}

func (w *genlWriter) endAttr(start int) {
	nativeEndian.PutUint16(w.buf[start:], uint16(len(w.buf)-start))
}

func (w *genlWriter) attr(typ uint16, v []byte) {
	var h [4]byte
	nativeEndian.PutUint16(h[0:], uint16(4+len(v)))
	nativeEndian.PutUint16(h[2:], typ)
	w.buf = append(w.buf, h[:]...)
	w.buf = append(w.buf, v...)
	for len(w.buf)%4 != 0 {
		w.buf = append(w.buf, 0)
	}
}

func (w *genlWriter) attrU16(typ, v uint16) {
	var b [2]byte
	nativeEndian.PutUint16(b[:], v)
	w.attr(typ, b[:])
}

func (w *genlWriter) attrBE16(typ, v uint16) {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	w.attr(typ, b[:])
}

func (w *genlWriter) attrU32(typ uint16, v uint32) {
	var b [4]byte
	nativeEndian.PutUint32(b[:], v)
	w.attr(typ, b[:])
}

func (w *genlWriter) attrString(typ uint16, s string) {
	var b [32]byte
	v := append(b[:0], s...)
	w.attr(typ, append(v, 0))
}

// Decoding the kernel's answers.

type nlMsg struct {
	typ     uint16
	flags   uint16
	seq     uint32
	payload []byte
}

// errno is the error of an NLMSG_ERROR answer (0: an acknowledgement).
func (m nlMsg) errno() syscall.Errno {
	if len(m.payload) < 4 {
		return unix.EBADMSG
	}
	return syscall.Errno(-int32(nativeEndian.Uint32(m.payload)))
}

// nlMessages iterates over the netlink messages of one datagram.
func nlMessages(b []byte) func(yield func(nlMsg) bool) {
	return func(yield func(nlMsg) bool) {
		for len(b) >= unix.NLMSG_HDRLEN {
			l := int(nativeEndian.Uint32(b))
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				return
			}
			m := nlMsg{
				typ:     nativeEndian.Uint16(b[4:]),
				flags:   nativeEndian.Uint16(b[6:]),
				seq:     nativeEndian.Uint32(b[8:]),
				payload: b[unix.NLMSG_HDRLEN:l],
			}
			if !yield(m) {
				return
			}
			b = b[min(nlAlign(l), len(b)):]
		}
	}
}

// nlAttrs iterates over the attributes in b (type without the flag bits).
func nlAttrs(b []byte) func(yield func(uint16, []byte) bool) {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= 4 {
			l := int(nativeEndian.Uint16(b))
			if l < 4 || l > len(b) {
				return
			}
			if !yield(nativeEndian.Uint16(b[2:])&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER), b[4:l]) {
				return
			}
			b = b[min(nlAlign(l), len(b)):]
		}
	}
}

func nlAlign(n int) int { return (n + 3) &^ 3 }
