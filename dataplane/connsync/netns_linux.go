package connsync

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/internal/netnsrun"
)

// tablePath is the table of the reading thread's network namespace
// (/proc/net follows the process's first thread instead).
const tablePath = "/proc/thread-self/net/ip_vs_conn"

// UDP and IP header lengths, taken off the MTU.
const (
	udp4HeaderLen = 20 + 8
	udp6HeaderLen = 40 + 8
)

// OpenTable opens the IPVS connection table of the network namespace
// whose file is nsPath ("" is the caller's). The file stays bound to that
// namespace; read it with NewReader.
func OpenTable(nsPath string) (*os.File, error) {
	var f *os.File
	err := netnsrun.Do(nsPath, func() error {
		var err error
		f, err = os.Open(tablePath)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("the kernel has no IPVS (load the ip_vs module): %w", err)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening the IPVS connection table: %w", err)
	}
	return f, nil
}

// Dial opens a sender to the backup daemons of d's settings (interface,
// sync id, group, port, TTL, maxlen; its Role is ignored) from the
// network namespace whose file is nsPath ("" is the caller's). Messages
// leave d.Interface to d's group and port (the first of a backup's
// ports: any of them works), with d's TTL, multicast loop off (a backup
// daemon on this box must not learn this box's own connections), at most
// d's MaxLen long (the kernel's default when 0) and no longer than the
// interface's MTU takes unfragmented. d must match the peer's backup: it
// drops a message of another sync id and one longer than its maxlen.
func Dial(nsPath string, d syncd.Daemon, o Options) (*Sender, error) {
	d.Role = syncd.Master
	if err := d.Validate(); err != nil {
		return nil, err
	}
	r := d.Resolved()
	var s *Sender
	err := netnsrun.Do(nsPath, func() error {
		out, maxLen, err := dialGroup(r)
		if err != nil {
			return err
		}
		s = newSender(out, d.SyncID, maxLen, o, fmt.Sprintf("%s on %s", groupAddr(r), r.Interface))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("opening the connection sync socket: %w", err)
	}
	s.nsPath = nsPath
	return s, nil
}

func groupAddr(d syncd.Daemon) netip.AddrPort { return netip.AddrPortFrom(d.Group, d.Port) }

// dialGroup opens a UDP socket connected to d's group and port, its
// multicast options set before the connect (which picks the route by
// them), as the kernel's master sets its own (make_send_sock). It
// returns the socket and the most payload a message may take.
func dialGroup(d syncd.Daemon) (*net.UDPConn, int, error) {
	ifi, err := net.InterfaceByName(d.Interface)
	if err != nil {
		return nil, 0, fmt.Errorf("sync interface %s: %w", d.Interface, err)
	}
	network, hlen := "udp4", udp4HeaderLen
	if d.Group.Is6() {
		network, hlen = "udp6", udp6HeaderLen
	}
	maxLen := ifi.MTU - hlen
	if d.MaxLen != 0 {
		maxLen = min(maxLen, int(d.MaxLen))
	}
	if maxLen < headerLen+entryLen6 {
		return nil, 0, fmt.Errorf("a message of at most %d bytes (maxlen %d, %s's MTU %d) cannot carry an IPv6 entry", maxLen, d.MaxLen, d.Interface, ifi.MTU)
	}
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = setMulticast(int(fd), d.Group.Is6(), ifi.Index, d.TTL) })
		return errors.Join(err, serr)
	}}
	c, err := dialer.Dial(network, groupAddr(d).String())
	if err != nil {
		return nil, 0, err
	}
	return c.(*net.UDPConn), maxLen, nil
}

// setMulticast sets the outgoing interface, the TTL (hop limit), no
// loop, and fragmentation allowed (the kernel's master sets
// IP_PMTUDISC_DONT so that a smaller MTU on the way does not drop it).
func setMulticast(fd int, v6 bool, ifindex int, ttl uint8) error {
	if v6 {
		return errors.Join(
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex),
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, int(ttl)),
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_LOOP, 0),
			unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DONT))
	}
	return errors.Join(
		unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF, &unix.IPMreqn{Ifindex: int32(ifindex)}),
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, int(ttl)),
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_LOOP, 0),
		unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT))
}
