package announce

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mdlayher/ndp"
	"golang.org/x/sys/unix"
)

func (s *socket) handleNDP(frame []byte, log *slog.Logger, vips vipSet, warned map[netip.Addr]time.Time) {
	v, p := decide6(frame, s.mac, vips)
	switch v {
	case answer:
		na := p.msg.(*ndp.NeighborAdvertisement)
		if err := s.sendNDP(p); err != nil {
			log.Warn("answering a neighbour solicitation", "vip", na.TargetAddress, "to", p.dst, "err", err)
			return
		}
		log.Debug("answered a neighbour solicitation", "vip", na.TargetAddress, "to", p.dst, "to_mac", p.ethDst.String())
	case conflict:
		vip, op := p.src, "neighbour solicitation"
		if na, ok := p.msg.(*ndp.NeighborAdvertisement); ok {
			vip, op = na.TargetAddress, "neighbour advertisement"
		}
		if now := time.Now(); now.Sub(warned[vip]) >= conflictEvery {
			warned[vip] = now
			log.Warn("another host uses a VIP lbd announces here", "vip", vip, "other_mac", p.ethSrc.String(), "op", op)
		}
	case ignoreHopLimit:
		log.Debug("ignored a neighbour discovery message with a hop limit below 255", "from", p.src, "hop_limit", p.hopLimit)
	}
}

// sendNDP writes p, built for this socket's MAC.
func (s *socket) sendNDP(p *ndpPacket) error {
	b, err := p.marshal()
	if err != nil {
		return err
	}
	return s.write(b, p.ethDst)
}

// solicitedNodeGroups returns the solicited-node multicast groups of the
// IPv6 VIPs in vips, sorted and without duplicates: VIPs that share their
// low 24 bits share a group.
func solicitedNodeGroups(vips vipSet) []netip.Addr {
	var out []netip.Addr
	for _, v := range vips {
		if kindOf(v) != ndpKind {
			continue
		}
		if g, err := ndp.SolicitedNodeMulticast(v); err == nil {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// memberships are the solicited-node multicast groups that an NDP socket
// has joined on its interface. They are held by an IPv6 datagram socket
// of their own, never bound so that it receives nothing: joining through
// the IPv6 stack programs the NIC's multicast filter, which would
// otherwise drop the solicitations for a VIP that is not on the interface,
// and announces the group with MLD, so that a snooping switch forwards
// them to this port. Closing the socket leaves every group. Joining needs
// no capability.
type memberships struct {
	fd     int
	ifi    *net.Interface
	joined []netip.Addr
}

func openMemberships(ifi *net.Interface) (*memberships, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("opening a socket to join multicast groups on %s: %w", ifi.Name, err)
	}
	return &memberships{fd: fd, ifi: ifi}, nil
}

// set joins the groups in want (sorted) that are not joined yet and leaves
// the joined ones that are not in want. A group that fails is retried on
// the next call.
func (m *memberships) set(want []netip.Addr) error {
	var errs []error
	var joined []netip.Addr
	for _, g := range m.joined {
		if _, keep := slices.BinarySearchFunc(want, g, netip.Addr.Compare); keep {
			joined = append(joined, g)
		} else if err := m.setsockopt(unix.IPV6_LEAVE_GROUP, g); err != nil {
			errs = append(errs, fmt.Errorf("leaving %s on %s: %w", g, m.ifi.Name, err))
			joined = append(joined, g)
		}
	}
	for _, g := range want {
		if _, ok := slices.BinarySearchFunc(m.joined, g, netip.Addr.Compare); ok {
			continue
		}
		if err := m.setsockopt(unix.IPV6_JOIN_GROUP, g); err != nil {
			errs = append(errs, fmt.Errorf("joining %s on %s: %w", g, m.ifi.Name, err))
			continue
		}
		joined = append(joined, g)
	}
	slices.SortFunc(joined, netip.Addr.Compare)
	m.joined = joined
	return errors.Join(errs...)
}

func (m *memberships) setsockopt(opt int, group netip.Addr) error {
	mreq := &unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(m.ifi.Index)}
	return unix.SetsockoptIPv6Mreq(m.fd, unix.IPPROTO_IPV6, opt, mreq)
}

func (m *memberships) close() {
	unix.Close(m.fd)
	m.joined = nil
}
