package ipvs

// AddServices: the cold path's batch writer. Instead of one synchronous
// moby/ipvs round trip per object (send, getsockname, wait for the ack,
// zero a 64 KiB buffer, parse), it encodes many IPVS generic-netlink
// requests into one buffer (package genl does the generic netlink part)
// and hands them to the kernel with one sendmsg.
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

	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/lvs"
	"golang.org/x/sys/unix"
)

// IPVS numbers, from include/uapi/linux/ip_vs.h, as github.com/moby/ipvs
// v1.1.0 names them in constants_linux.go (Apache-2.0) and lays them out in
// netlink_linux.go. The generic netlink encoding is package genl's.
const (
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
	ipvsSvcAttrFWMark        = 5 // u32
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
	ipvsDestAttrTunType          = 13 // u8
	ipvsDestAttrTunPort          = 14 // be16
	ipvsDestAttrTunFlags         = 15 // u16

	// Forwarding methods (IP_VS_CONN_F_*).
	ipvsConnFlagMasq   = 0
	ipvsConnFlagTunnel = 2
	ipvsConnFlagDRoute = 3
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
	writers := make([]*batchWriter, 0, workers)
	defer func() {
		for _, w := range writers {
			w.close()
		}
	}()
	for range workers {
		w, err := newBatchWriter(family)
		if err != nil {
			if len(writers) == 0 {
				return fail(err)
			}
			break // fewer workers
		}
		writers = append(writers, w)
	}
	var next atomic.Int64
	run := func(w *batchWriter) {
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
	k.familyOnce.Do(func() { k.family, k.familyErr = genl.ResolveFamily(ipvsGenlName) })
	return k.family, k.familyErr
}

// batchWriter is one generic-netlink socket with the IPVS requests of its
// current send.
type batchWriter struct {
	genl.Encoder // requests of the current send
	conn         *genl.Conn
	family       uint16
	seq          uint32
	// what each request of the current send was: the service's index in
	// the chunk and the destination's index in it (-1: the service).
	sent []sentObj
	// firstSeq is the sequence number of sent[0].
	firstSeq uint32
}

type sentObj struct{ svc, dest int }

func newBatchWriter(family uint16) (*batchWriter, error) {
	// Error answers without a copy of the request, and room for every
	// request of a send to fail (best effort: the defaults suffice for the
	// default PerSend).
	c, err := genl.Open(genl.Options{
		CapAck:      true,
		RecvBuf:     batchRecvBuf,
		SendBuf:     batchSendBuf,
		RecvTimeout: batchAnswerWait,
	})
	if err != nil {
		return nil, err
	}
	return &batchWriter{conn: c, family: family}, nil
}

func (w *batchWriter) close() { w.conn.Close() }

// addChunk creates the services of one chunk: one or more sends of the
// services, then sends of the destinations of those the kernel created.
func (w *batchWriter) addChunk(svcs []Service, errs []error, o BatchOptions) {
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

func (w *batchWriter) appendService(s *Service, flags uint16, idx int) {
	w.seq++
	if len(w.sent) == 0 {
		w.firstSeq = w.seq
	}
	w.sent = append(w.sent, sentObj{svc: idx, dest: -1})
	encodeNewService(w, s, flags)
}

func (w *batchWriter) appendDest(s *Service, j int, flags uint16, idx int) {
	w.seq++
	if len(w.sent) == 0 {
		w.firstSeq = w.seq
	}
	w.sent = append(w.sent, sentObj{svc: idx, dest: j})
	encodeDest(w, ipvsCmdNewDest, s, &s.Dests[j], flags)
}

func encodeNewService(w *batchWriter, s *Service, flags uint16) {
	start := w.Begin(w.family, flags, w.seq, ipvsCmdNewService, ipvsGenlVersion)
	nest := w.BeginNested(ipvsCmdAttrService)
	w.serviceKey(s)
	w.String(ipvsSvcAttrSchedName, s.Scheduler)
	var f [8]byte
	binary.NativeEndian.PutUint32(f[0:], s.Flags)
	binary.NativeEndian.PutUint32(f[4:], 0xffffffff) // mask: set every flag as given
	w.Bytes(ipvsSvcAttrFlags, f[:])
	w.U32(ipvsSvcAttrTimeout, s.Timeout)
	w.U32(ipvsSvcAttrNetmask, s.Netmask)
	w.EndNested(nest)
	w.End(start)
}

// encodeDest encodes a destination request of cmd (new or set) for s.
func encodeDest(w *batchWriter, cmd uint8, s *Service, d *Dest, flags uint16) {
	start := w.Begin(w.family, flags, w.seq, cmd, ipvsGenlVersion)
	nest := w.BeginNested(ipvsCmdAttrService)
	w.serviceKey(s)
	w.EndNested(nest)
	nest = w.BeginNested(ipvsCmdAttrDest)
	a := d.Addr.Addr()
	af := uint16(unix.AF_INET)
	if a.Is6() && !a.Is4In6() {
		af = unix.AF_INET6
		b := a.As16()
		w.Bytes(ipvsDestAttrAddress, b[:])
	} else {
		b := a.Unmap().As4()
		w.Bytes(ipvsDestAttrAddress, b[:])
	}
	w.BE16(ipvsDestAttrPort, d.Addr.Port())
	w.U32(ipvsDestAttrForwardingMethod, connFlag(d.Forward.Method))
	w.U32(ipvsDestAttrWeight, uint32(d.Weight))
	w.U32(ipvsDestAttrUpperThreshold, 0)
	w.U32(ipvsDestAttrLowerThreshold, 0)
	w.U16(ipvsDestAttrAddressFamily, af)
	if d.Forward.Method == lvs.Tunnel {
		w.U8(ipvsDestAttrTunType, uint8(d.Forward.Tunnel)) // lvs.Encap numbers them as the kernel does
		w.BE16(ipvsDestAttrTunPort, d.Forward.Port)
		w.U16(ipvsDestAttrTunFlags, uint16(d.Forward.Checksum))
	}
	w.EndNested(nest)
	w.End(start)
}

// connFlag is the kernel's number of a forwarding method.
func connFlag(m lvs.Method) uint32 {
	switch m {
	case lvs.DR:
		return ipvsConnFlagDRoute
	case lvs.Tunnel:
		return ipvsConnFlagTunnel
	}
	return ipvsConnFlagMasq
}

// serviceKey writes the attributes that name a virtual server.
func (w *batchWriter) serviceKey(s *Service) {
	a := s.Key.Addr
	if a.Is6() && !a.Is4In6() {
		w.U16(ipvsSvcAttrAddressFamily, unix.AF_INET6)
	} else {
		w.U16(ipvsSvcAttrAddressFamily, unix.AF_INET)
	}
	if s.Key.IsFWMark() {
		w.U32(ipvsSvcAttrFWMark, s.Key.FWMark) // the kernel then ignores address, port, protocol
		return
	}
	w.U16(ipvsSvcAttrProtocol, ipvsProtocol(s.Key))
	if a.Is6() && !a.Is4In6() {
		b := a.As16()
		w.Bytes(ipvsSvcAttrAddress, b[:])
	} else {
		b := a.Unmap().As4()
		w.Bytes(ipvsSvcAttrAddress, b[:])
	}
	w.BE16(ipvsSvcAttrPort, s.Key.Port)
}

// flush sends the pending requests with the last one asking an ack, and
// records the errors the kernel answers, by sequence number.
func (w *batchWriter) flush(svcs []Service, errs []error, destErrs [][]error) {
	if len(w.sent) == 0 {
		return
	}
	defer func() { w.Reset(); w.sent = w.sent[:0] }()
	// Ask the last request's ack: when it arrives, every answer of the
	// send has.
	w.AddLastFlags(unix.NLM_F_ACK)
	lastSeq := w.seq
	record := func(obj sentObj, err error) { recordErr(svcs, errs, destErrs, obj, err) }
	if err := w.conn.Send(w.Encoded()); err != nil {
		for _, obj := range w.sent {
			record(obj, err)
		}
		return
	}
	answered := 0 // requests up to this one have a known outcome
	for answered < len(w.sent) {
		b, err := w.conn.Recv()
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
		for m := range genl.Messages(b) {
			if m.Type != unix.NLMSG_ERROR {
				continue
			}
			i := int(m.Seq - w.firstSeq)
			if i < answered || i >= len(w.sent) {
				continue // an answer of an earlier send
			}
			if e := m.Errno(); e != 0 {
				recordAnswer(svcs, errs, destErrs, w.sent[i], e)
			}
			answered = i + 1 // answers come in order
			if m.Seq == lastSeq {
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
