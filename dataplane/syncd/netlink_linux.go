package syncd

// The kernel side: IPVS_CMD_NEW_DAEMON, IPVS_CMD_DEL_DAEMON and the
// IPVS_CMD_GET_DAEMON dump of the IPVS generic netlink family, through
// lbd's own generic netlink code (package genl).
//
// What the kernel does with them (net/netfilter/ipvs/ip_vs_ctl.c,
// ip_vs_sync.c, Linux 4.3 and later):
//   - NEW_DAEMON needs STATE, MCAST_IFN and SYNC_ID (else EINVAL); the
//     others are optional and zero means the default. An unknown interface
//     is ENODEV, a group that is not multicast EINVAL, a running daemon of
//     that state EEXIST: its settings cannot be changed in place.
//   - DEL_DAEMON needs STATE; ESRCH when none of that state runs.
//   - GET_DAEMON is a dump only: one IPVS_CMD_NEW_DAEMON message per
//     running daemon, master first, with every setting as resolved at start.
//   - Stopping a daemon whose kernel thread has not run yet (just started,
//     on a busy machine) makes kthread_stop return EINTR; netlink_rcv_skb
//     then sends no answer at all. The daemon is stopped all the same.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/internal/netnsrun"
)

// IPVS numbers, from include/uapi/linux/ip_vs.h.
const (
	ipvsGenlName    = "IPVS"
	ipvsGenlVersion = 1

	ipvsCmdNewDaemon = 9
	ipvsCmdDelDaemon = 10
	ipvsCmdGetDaemon = 11

	ipvsCmdAttrDaemon = 3 // nested

	ipvsDaemonAttrState       = 1 // u32: IP_VS_STATE_MASTER 1, BACKUP 2
	ipvsDaemonAttrMcastIfn    = 2 // NUL-terminated, at most 15 bytes
	ipvsDaemonAttrSyncID      = 3 // u32
	ipvsDaemonAttrSyncMaxLen  = 4 // u16
	ipvsDaemonAttrMcastGroup  = 5 // IPv4 address, network byte order
	ipvsDaemonAttrMcastGroup6 = 6 // struct in6_addr
	ipvsDaemonAttrMcastPort   = 7 // u16 in host byte order (the kernel htons it)
	ipvsDaemonAttrMcastTTL    = 8 // u8
)

// answerWait bounds the wait for the kernel's answer. The kernel runs a
// request, and queues its answer, before sendmsg returns (and fills a
// dump's next part within recvmsg), so waiting at all means no answer is
// coming: see errNoAnswer.
const answerWait = 2 * time.Second

// errNoAnswer: the kernel ran the request and answered nothing, which
// netlink does when the handler returns EINTR (see above).
var errNoAnswer = errors.New("the kernel ran the request but sent no answer")

// syncVersionKey is the sysctl of the protocol version a master sends.
const syncVersionKey = "/proc/sys/net/ipv4/vs/sync_version"

// NetlinkKernel is the sync daemons of one network namespace, driven over
// a generic netlink socket opened there. It is safe for concurrent use.
type NetlinkKernel struct {
	mu     sync.Mutex
	conn   *genl.Conn
	family uint16
	seq    uint32
	enc    genl.Encoder
	// nsPath is the namespace OpenAt opened the socket in ("" for the
	// caller's), for reading its sysctls.
	nsPath string
}

var _ Kernel = (*NetlinkKernel)(nil)

// Open opens the sync daemons of the caller's network namespace. It fails
// when the kernel has no IPVS (the ip_vs module is not loaded).
func Open() (*NetlinkKernel, error) { return OpenAt("") }

// OpenAt opens the sync daemons of the network namespace whose file is
// nsPath (/run/netns/NAME, /proc/PID/ns/net); "" is the caller's. The
// socket stays in that namespace; the caller's thread never leaves its own.
func OpenAt(nsPath string) (*NetlinkKernel, error) {
	k := &NetlinkKernel{nsPath: nsPath}
	err := netnsrun.Do(nsPath, func() error {
		family, err := genl.ResolveFamily(ipvsGenlName)
		if errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("the kernel has no IPVS (load the ip_vs module): %w", err)
		}
		if err != nil {
			return err
		}
		k.family = family
		k.conn, err = genl.Open(genl.Options{CapAck: true, RecvTimeout: answerWait})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening the IPVS sync daemons' netlink socket: %w", err)
	}
	return k, nil
}

// Close closes the socket. The daemons keep running.
func (k *NetlinkKernel) Close() error { return k.conn.Close() }

// SyncVersion reads net.ipv4.vs.sync_version of the namespace: the
// protocol version its master sends (0 or 1; a backup reads both).
func (k *NetlinkKernel) SyncVersion() (int, error) {
	var v int
	err := netnsrun.Do(k.nsPath, func() error {
		b, err := os.ReadFile(syncVersionKey)
		if err != nil {
			return err
		}
		v, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("reading net.ipv4.vs.sync_version: %w", err)
	}
	return v, nil
}

// Start starts d.
func (k *NetlinkKernel) Start(d Daemon) error {
	if err := d.Validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	encodeStart(&k.enc, k.family, k.seq, d)
	err := k.request()
	if errors.Is(err, errNoAnswer) {
		err = k.confirm(d.Role, true, err)
	}
	if errors.Is(err, syscall.EEXIST) {
		return fmt.Errorf("%w (%w): the kernel cannot change a running daemon, stop it first", ErrRunning, err)
	}
	if errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("no interface %s in the namespace: %w", d.Interface, err)
	}
	return err
}

// Stop stops the daemon of role r.
func (k *NetlinkKernel) Stop(r Role) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	start := k.enc.Begin(k.family, unix.NLM_F_REQUEST|unix.NLM_F_ACK, k.seq, ipvsCmdDelDaemon, ipvsGenlVersion)
	nest := k.enc.BeginNested(ipvsCmdAttrDaemon)
	k.enc.U32(ipvsDaemonAttrState, uint32(r))
	k.enc.EndNested(nest)
	k.enc.End(start)
	err := k.request()
	if errors.Is(err, errNoAnswer) {
		err = k.confirm(r, false, err)
	}
	if errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("%w (%w)", ErrNotRunning, err)
	}
	return err
}

// confirm checks, after a request the kernel ran without answering,
// whether the daemon of role r runs as the request wanted: nil if so,
// else the request's error noAnswer.
func (k *NetlinkKernel) confirm(r Role, running bool, noAnswer error) error {
	ds, err := k.list()
	if err != nil {
		return fmt.Errorf("%w; listing the daemons to see what it did: %w", noAnswer, err)
	}
	found := false
	for _, d := range ds {
		found = found || d.Role == r
	}
	if found != running {
		return noAnswer
	}
	return nil
}

// List dumps the running daemons.
func (k *NetlinkKernel) List() ([]Daemon, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.list()
}

func (k *NetlinkKernel) list() ([]Daemon, error) {
	var out []Daemon
	err := genl.RetryDump(genl.ErrDumpInterrupted, func() error {
		var err error
		out, err = k.dump()
		return err
	})
	return out, err
}

// encodeStart encodes the NEW_DAEMON request for d, leaving out settings
// at zero: the kernel then takes its defaults.
func encodeStart(e *genl.Encoder, family uint16, seq uint32, d Daemon) {
	start := e.Begin(family, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, ipvsCmdNewDaemon, ipvsGenlVersion)
	nest := e.BeginNested(ipvsCmdAttrDaemon)
	e.U32(ipvsDaemonAttrState, uint32(d.Role))
	e.String(ipvsDaemonAttrMcastIfn, d.Interface)
	e.U32(ipvsDaemonAttrSyncID, uint32(d.SyncID))
	if d.MaxLen != 0 {
		e.U16(ipvsDaemonAttrSyncMaxLen, d.MaxLen)
	}
	if g := d.Group.Unmap(); g.Is4() {
		b := g.As4()
		e.Bytes(ipvsDaemonAttrMcastGroup, b[:])
	} else if g.Is6() {
		b := g.As16()
		e.Bytes(ipvsDaemonAttrMcastGroup6, b[:])
	}
	if d.Port != 0 {
		e.U16(ipvsDaemonAttrMcastPort, d.Port)
	}
	if d.TTL != 0 {
		e.U8(ipvsDaemonAttrMcastTTL, d.TTL)
	}
	e.EndNested(nest)
	e.End(start)
}

// request sends the encoded request and waits for its acknowledgement.
func (k *NetlinkKernel) request() error {
	defer k.enc.Reset()
	if err := k.conn.Send(k.enc.Encoded()); err != nil {
		return err
	}
	// recvError only names a missing answer (EAGAIN after answerWait).
	return recvError(k.conn.ReadAck(k.seq))
}

// dump runs one GET_DAEMON dump.
func (k *NetlinkKernel) dump() ([]Daemon, error) {
	k.seq++
	start := k.enc.Begin(k.family, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, k.seq, ipvsCmdGetDaemon, ipvsGenlVersion)
	k.enc.End(start)
	err := k.conn.Send(k.enc.Encoded())
	k.enc.Reset()
	if err != nil {
		return nil, err
	}
	var out []Daemon
	err = k.conn.ReadDump(k.seq, k.family, func(m genl.Message) error {
		d, err := decodeDaemonMessage(m.Payload)
		if err == nil {
			out = append(out, d)
		}
		return err
	})
	if err != nil {
		return nil, recvError(err)
	}
	return out, nil
}

func recvError(err error) error {
	if errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("%w (nothing within %v: %w)", errNoAnswer, answerWait, err)
	}
	return err
}

// decodeDaemonMessage reads a daemon from a dump message's payload (the
// generic netlink header, then IPVS_CMD_ATTR_DAEMON).
func decodeDaemonMessage(payload []byte) (Daemon, error) {
	if len(payload) < genl.HeaderLen {
		return Daemon{}, fmt.Errorf("short sync daemon message (%d bytes)", len(payload))
	}
	for typ, v := range genl.Attrs(payload[genl.HeaderLen:]) {
		if typ == ipvsCmdAttrDaemon {
			return decodeDaemon(v)
		}
	}
	return Daemon{}, errors.New("sync daemon message without a daemon")
}

// decodeDaemon reads the attributes nested in IPVS_CMD_ATTR_DAEMON.
func decodeDaemon(b []byte) (Daemon, error) {
	var d Daemon
	ne := binary.NativeEndian
	for typ, v := range genl.Attrs(b) {
		switch {
		case typ == ipvsDaemonAttrState && len(v) >= 4:
			d.Role = Role(ne.Uint32(v))
		case typ == ipvsDaemonAttrMcastIfn:
			d.Interface, _, _ = strings.Cut(string(v), "\x00")
		case typ == ipvsDaemonAttrSyncID && len(v) >= 4:
			d.SyncID = uint8(ne.Uint32(v))
		case typ == ipvsDaemonAttrSyncMaxLen && len(v) >= 2:
			d.MaxLen = ne.Uint16(v)
		case typ == ipvsDaemonAttrMcastGroup && len(v) >= 4:
			d.Group = netip.AddrFrom4([4]byte(v[:4]))
		case typ == ipvsDaemonAttrMcastGroup6 && len(v) >= 16:
			d.Group = netip.AddrFrom16([16]byte(v[:16]))
		case typ == ipvsDaemonAttrMcastPort && len(v) >= 2:
			d.Port = ne.Uint16(v)
		case typ == ipvsDaemonAttrMcastTTL && len(v) >= 1:
			d.TTL = v[0]
		}
	}
	if d.Role != Master && d.Role != Backup {
		return Daemon{}, fmt.Errorf("sync daemon of unknown state %d", int(d.Role))
	}
	return d, nil
}
