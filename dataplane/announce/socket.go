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

// socket is one AF_PACKET socket bound to an interface and the ARP
// EtherType, with the goroutine that answers on it. mdlayher/arp's Client
// is not used: its Dial and New refuse an interface without an IPv4
// address, which lbd does not need, since every packet it sends carries a
// VIP as the sender address.
type socket struct {
	conn  *packet.Conn
	index int
	mac   net.HardwareAddr
	// down has one slot: a read returned ENETDOWN, which the kernel
	// reports once when the interface goes down or is deleted.
	down chan struct{}
	// done is closed when the reader has returned; err then says why.
	done chan struct{}
	err  error
}

// openSocket binds a socket to ifi and starts its reader, which answers
// who-has for the VIPs that vips returns at that moment. close stops it.
func openSocket(ifi *net.Interface, log *slog.Logger, vips func() vipSet) (*socket, error) {
	conn, err := packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeARP), nil)
	if err != nil {
		return nil, fmt.Errorf("opening ARP socket on %s: %w", ifi.Name, err)
	}
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("opening ARP socket on %s: %w", ifi.Name, err)
	}
	s := &socket{
		conn:  conn,
		index: ifi.Index,
		mac:   ifi.HardwareAddr,
		down:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
	go s.serve(rc, log, vips)
	return s, nil
}

// close closes the socket and waits for its reader to return.
func (s *socket) close() {
	s.conn.Close()
	<-s.done
}

func (s *socket) serve(rc syscall.RawConn, log *slog.Logger, vips func() vipSet) {
	defer close(s.done)
	buf := make([]byte, 256) // ARP frames are 60 bytes; a longer one is truncated and ignored
	warned := map[netip.Addr]time.Time{}
	for {
		n, pkttype, err := recv(rc, buf)
		if errors.Is(err, unix.ENETDOWN) {
			select {
			case s.down <- struct{}{}:
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
		// interface here.
		if pkttype != unix.PACKET_HOST && pkttype != unix.PACKET_BROADCAST {
			continue
		}
		v, p := decide(buf[:n], s.mac, vips())
		switch v {
		case answer:
			if err := s.send(p, p.TargetHardwareAddr); err != nil {
				log.Warn("answering ARP", "vip", p.SenderIP, "asker", p.TargetIP, "err", err)
				continue
			}
			log.Debug("answered ARP", "vip", p.SenderIP, "asker", p.TargetIP, "asker_mac", p.TargetHardwareAddr.String())
		case conflict:
			if now := time.Now(); now.Sub(warned[p.SenderIP]) >= conflictEvery {
				warned[p.SenderIP] = now
				log.Warn("another host uses a VIP lbd announces here", "vip", p.SenderIP, "other_mac", p.SenderHardwareAddr.String(), "op", p.Operation.String())
			}
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

// send writes p in an Ethernet frame to dst.
func (s *socket) send(p *arp.Packet, dst net.HardwareAddr) error {
	pb, err := p.MarshalBinary()
	if err != nil {
		return err
	}
	f := ethernet.Frame{Destination: dst, Source: s.mac, EtherType: ethernet.EtherTypeARP, Payload: pb}
	fb, err := f.MarshalBinary()
	if err != nil {
		return err
	}
	// The deadline is shared with the reader's replies; both only ever
	// push it forward by writeTimeout.
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err = s.conn.WriteTo(fb, &packet.Addr{HardwareAddr: dst})
	return err
}

// sendGratuitous broadcasts one gratuitous ARP request and one reply.
func (s *socket) sendGratuitous(vip netip.Addr) error {
	ps, err := gratuitousPackets(s.mac, vip)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ps {
		if err := s.send(p, ethernet.Broadcast); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Operation, err))
		}
	}
	return errors.Join(errs...)
}
