package announce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
)

// writeTimeout bounds a send on a stuck device queue; ARP is best effort.
const writeTimeout = time.Second

// conflictEvery limits conflict warnings to one per VIP per interval.
const conflictEvery = time.Minute

// socket is one AF_PACKET socket bound to an interface, with the goroutine
// that answers on it: for ARP bound to the ARP EtherType, for NDP to IPv6
// with a filter that keeps neighbour discovery only. mdlayher/arp's Client
// is not used: its Dial and New refuse an interface without an IPv4
// address, which lbd does not need, since every packet it sends carries a
// VIP as the sender address. Nor is mdlayher/ndp's Conn, a raw ICMPv6
// socket: bound to the interface's link-local address (as MetalLB does) it
// never sees the unicast solicitations that neighbours send to a VIP to
// confirm it, and a unicast answer would wait for the kernel to resolve
// the asker first.
type socket struct {
	kind  kind
	conn  *packet.Conn
	index int
	mac   net.HardwareAddr
	// groups holds an NDP socket's solicited-node multicast memberships;
	// nil for ARP. Only the link's worker touches it.
	groups *memberships
	// done is closed when the reader has returned; err then says why.
	done chan struct{}
	err  error
}

// openSocket binds a k socket to ifi and starts its reader, which answers
// for the VIPs that vips returns at that moment. A read that returns
// ENETDOWN, which the kernel reports once when the interface goes down or
// is deleted, is signalled on down (one slot). close stops it.
func openSocket(k kind, ifi *net.Interface, log *slog.Logger, vips func() vipSet, down chan<- struct{}) (*socket, error) {
	s := &socket{kind: k, index: ifi.Index, mac: ifi.HardwareAddr, done: make(chan struct{})}
	proto, cfg := int(ethernet.EtherTypeARP), &packet.Config{}
	if k == ndpKind {
		filter, err := ndpFilter()
		if err != nil {
			return nil, fmt.Errorf("opening %v socket on %s: %w", k, ifi.Name, err)
		}
		proto, cfg.Filter = int(ethernet.EtherTypeIPv6), filter
	}
	conn, err := packet.Listen(ifi, packet.Raw, proto, cfg)
	if err != nil {
		return nil, fmt.Errorf("opening %v socket on %s: %w", k, ifi.Name, err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("opening %v socket on %s: %w", k, ifi.Name, err)
	}
	if k == ndpKind {
		if s.groups, err = openMemberships(ifi); err != nil {
			conn.Close()
			return nil, err
		}
	}
	s.conn = conn
	go s.serve(rc, log, vips, down)
	return s, nil
}

// close closes the socket, which leaves its multicast groups, and waits
// for its reader to return.
func (s *socket) close() {
	s.conn.Close()
	if s.groups != nil {
		s.groups.close()
	}
	<-s.done
}

func (s *socket) serve(rc syscall.RawConn, log *slog.Logger, vips func() vipSet, down chan<- struct{}) {
	defer close(s.done)
	buf := make([]byte, maxFrame) // a longer frame is truncated and ignored
	warned := map[netip.Addr]time.Time{}
	for {
		n, pkttype, err := recv(rc, buf)
		if errors.Is(err, unix.ENETDOWN) {
			select {
			case down <- struct{}{}:
			default:
			}
			continue
		}
		if err != nil {
			s.err = err // read by the owner after done is closed
			return
		}
		// Only frames addressed to this host: not our own outgoing ones,
		// not others' seen in promiscuous mode or on a VLAN without an
		// interface here. Solicitations go to a multicast group.
		switch {
		case s.kind == arpKind && (pkttype == unix.PACKET_HOST || pkttype == unix.PACKET_BROADCAST):
			s.handleARP(buf[:n], log, vips(), warned)
		case s.kind == ndpKind && (pkttype == unix.PACKET_HOST || pkttype == unix.PACKET_MULTICAST):
			s.handleNDP(buf[:n], log, vips(), warned)
		}
	}
}

func (s *socket) handleARP(frame []byte, log *slog.Logger, vips vipSet, warned map[netip.Addr]time.Time) {
	v, p := decide(frame, s.mac, vips)
	switch v {
	case answer:
		if err := s.sendARP(p, p.TargetHardwareAddr); err != nil {
			log.Warn("answering ARP", "vip", p.SenderIP, "asker", p.TargetIP, "err", err)
			return
		}
		log.Debug("answered ARP", "vip", p.SenderIP, "asker", p.TargetIP, "asker_mac", p.TargetHardwareAddr.String())
	case conflict:
		if now := time.Now(); now.Sub(warned[p.SenderIP]) >= conflictEvery {
			warned[p.SenderIP] = now
			log.Warn("another host uses a VIP lbd announces here", "vip", p.SenderIP, "other_mac", p.SenderHardwareAddr.String(), "op", p.Operation.String())
		}
	}
}

// recv reads one frame and its packet type (PACKET_HOST, ...), which
// packet.Conn.ReadFrom does not return.
func recv(rc syscall.RawConn, buf []byte) (n int, pkttype uint8, err error) {
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		var from unix.Sockaddr
		n, from, rerr = unix.Recvfrom(int(fd), buf, 0)
		if rerr == unix.EAGAIN || rerr == unix.EINTR {
			return false // wait for the poller
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok {
			pkttype = ll.Pkttype
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	return n, pkttype, err
}

// write sends one Ethernet frame to dst.
func (s *socket) write(frame []byte, dst net.HardwareAddr) error {
	// The deadline is shared with the reader's replies; both only ever
	// push it forward by writeTimeout.
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err := s.conn.WriteTo(frame, &packet.Addr{HardwareAddr: dst})
	return err
}

// sendARP writes p in an Ethernet frame to dst.
func (s *socket) sendARP(p *arp.Packet, dst net.HardwareAddr) error {
	pb, err := p.MarshalBinary()
	if err != nil {
		return err
	}
	f := ethernet.Frame{Destination: dst, Source: s.mac, EtherType: ethernet.EtherTypeARP, Payload: pb}
	fb, err := f.MarshalBinary()
	if err != nil {
		return err
	}
	return s.write(fb, dst)
}

// sendGratuitous announces vip: one gratuitous ARP request and one reply,
// both broadcast, or one unsolicited neighbour advertisement to all nodes.
func (s *socket) sendGratuitous(vip netip.Addr) error {
	if s.kind == ndpKind {
		return s.sendNDP(unsolicitedAdvertisement(s.mac, vip))
	}
	ps, err := gratuitousPackets(s.mac, vip)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ps {
		if err := s.sendARP(p, ethernet.Broadcast); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Operation, err))
		}
	}
	return errors.Join(errs...)
}
