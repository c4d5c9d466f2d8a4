package vrrp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// readBufLen bounds a read: every message over the MTU is refused, and one
// longer than the buffer arrives truncated, hence over it too.
const readBufLen = 2048

// sourceTTL is how long Send reuses the source address it looked up: a
// netlink dump of every address per advert would be costly on a box with
// many, at up to 100 adverts a second.
const sourceTTL = time.Second

// hopLimit is the TTL / hop limit of every advert, sent or accepted: 255
// proves the sender is on the link (RFC 5798 5.1.1.3, 5.1.2.3).
const hopLimit = 255

// Socket is a raw socket for VRRP (IP protocol 112) of one family, bound to
// one interface and joined to that family's VRRP group on it. It belongs
// to the network namespace Listen ran in, and works from any goroutine
// afterwards, wherever its thread is. One goroutine may Read while others
// Send.
type Socket struct {
	ifname  string
	ifindex int
	family  int
	pc      net.PacketConn // *net.IPConn
	p4      *ipv4.PacketConn
	p6      *ipv6.PacketConn
	buf     []byte // Read's

	mu     sync.Mutex      // guards what follows
	nl     *netlink.Handle // in the Socket's namespace; nil once closed
	src    netip.Addr      // Send's source, looked up at srcAt
	srcAt  time.Time
	closed bool
}

// Received is one packet Read returned. When Err is nil, Advert is a valid
// advertisement from Src to Dst. Otherwise the packet was refused and Err
// says why (ReasonOf(Err) to count it); Advert is then filled when only
// the TTL was wrong, and zero when the packet did not parse.
type Received struct {
	Advert Advert
	Src    netip.Addr // without zone, even link-local
	Dst    netip.Addr // 224.0.0.18, ff02::12 or a unicast address of this host
	TTL    int        // TTL or hop limit; -1 if the kernel did not say
	Err    error
}

// Listen opens a VRRP socket on ifname for family 4 or 6: bound to the
// interface (SO_BINDTODEVICE), joined to Group4 or Group6 on it, receiving
// the TTL / hop limit and the destination address of each packet, sending
// with TTL / hop limit 255 out of that interface, without looping its own
// multicast back.
func Listen(ifname string, family int) (*Socket, error) {
	c, err := listen(ifname, family)
	if err != nil {
		return nil, fmt.Errorf("listening for VRRP on %s: %w", ifname, err)
	}
	return c, nil
}

func listen(ifname string, family int) (*Socket, error) {
	network, laddr := "ip4:"+strconv.Itoa(Protocol), "0.0.0.0"
	switch family {
	case 4:
	case 6:
		network, laddr = "ip6:"+strconv.Itoa(Protocol), "::"
	default:
		return nil, fmt.Errorf("address family %d, want 4 or 6", family)
	}
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, err
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		return bindToDevice(rc, ifname)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, laddr)
	if err != nil {
		return nil, err
	}
	// A netlink socket opened now stays in this namespace, so that Send
	// finds the interface's addresses whatever thread it runs on.
	nl, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	if err := nl.SetSocketTimeout(2 * time.Second); err != nil {
		nl.Close()
		pc.Close()
		return nil, fmt.Errorf("opening netlink: %w", err)
	}
	c := &Socket{ifname: ifname, ifindex: ifi.Index, family: family, pc: pc, nl: nl, buf: make([]byte, readBufLen)}
	if family == 4 {
		err = c.setup4(ifi)
	} else {
		err = c.setup6(ifi)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func bindToDevice(rc syscall.RawConn, ifname string) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("binding to device: %w", serr)
	}
	return nil
}

func (c *Socket) setup4(ifi *net.Interface) error {
	p := ipv4.NewPacketConn(c.pc)
	c.p4 = p
	for _, step := range []struct {
		what string
		err  func() error
	}{
		{"joining " + Group4.String(), func() error { return p.JoinGroup(ifi, &net.IPAddr{IP: Group4.AsSlice()}) }},
		{"setting the multicast interface", func() error { return p.SetMulticastInterface(ifi) }},
		{"turning multicast loopback off", func() error { return p.SetMulticastLoopback(false) }},
		{"setting the multicast TTL", func() error { return p.SetMulticastTTL(hopLimit) }},
		{"setting the TTL", func() error { return p.SetTTL(hopLimit) }},
		{"asking for control messages", func() error {
			return p.SetControlMessage(ipv4.FlagTTL|ipv4.FlagDst|ipv4.FlagInterface, true)
		}},
	} {
		if err := step.err(); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return nil
}

func (c *Socket) setup6(ifi *net.Interface) error {
	p := ipv6.NewPacketConn(c.pc)
	c.p6 = p
	// No IPV6_CHECKSUM, unlike keepalived: the kernel would then drop bad
	// checksums unseen, and they could not be counted. Read checks them.
	for _, step := range []struct {
		what string
		err  func() error
	}{
		{"joining " + Group6.String(), func() error { return p.JoinGroup(ifi, &net.IPAddr{IP: Group6.AsSlice()}) }},
		{"setting the multicast interface", func() error { return p.SetMulticastInterface(ifi) }},
		{"turning multicast loopback off", func() error { return p.SetMulticastLoopback(false) }},
		{"setting the multicast hop limit", func() error { return p.SetMulticastHopLimit(hopLimit) }},
		{"setting the hop limit", func() error { return p.SetHopLimit(hopLimit) }},
		{"asking for control messages", func() error {
			return p.SetControlMessage(ipv6.FlagHopLimit|ipv6.FlagDst|ipv6.FlagInterface, true)
		}},
	} {
		if err := step.err(); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
	}
	return nil
}

// Read waits for the next VRRP packet and returns it, refused or not (see
// Received). Each call reads one packet. The error is for the socket only:
// after Close, or when Close is called while Read waits, it wraps
// net.ErrClosed; after a deadline set with SetReadDeadline passes, it
// wraps os.ErrDeadlineExceeded. Only one goroutine may Read at a time.
func (c *Socket) Read() (Received, error) {
	var (
		n   int
		src net.Addr
		dst net.IP
		ttl = -1
		err error
	)
	if c.p4 != nil {
		var cm *ipv4.ControlMessage
		n, cm, src, err = c.p4.ReadFrom(c.buf)
		if cm != nil {
			ttl, dst = cm.TTL, cm.Dst
		}
	} else {
		var cm *ipv6.ControlMessage
		n, cm, src, err = c.p6.ReadFrom(c.buf)
		if cm != nil {
			ttl, dst = cm.HopLimit, cm.Dst
		}
	}
	if err != nil {
		return Received{}, fmt.Errorf("reading VRRP on %s: %w", c.ifname, err)
	}
	r := Received{TTL: ttl}
	if ia, ok := src.(*net.IPAddr); ok {
		r.Src, _ = netip.AddrFromSlice(ia.IP)
	}
	// No zone: the interface is the Socket's, and the zone x/net gives is
	// looked up in the namespace of the reading thread.
	r.Src = r.Src.Unmap().WithZone("")
	r.Dst, _ = netip.AddrFromSlice(dst)
	r.Dst = r.Dst.Unmap()
	a, perr := ParseAdvert(c.buf[:n], r.Src, r.Dst)
	r.Advert = a
	switch {
	case ttl != hopLimit:
		r.Err = refuse(ErrBadTTL, "TTL or hop limit %d, want %d", ttl, hopLimit)
	case perr != nil:
		r.Err = perr
	}
	return r, nil
}

// SetReadDeadline makes a Read waiting at t return an error wrapping
// os.ErrDeadlineExceeded; the zero time waits forever.
func (c *Socket) SetReadDeadline(t time.Time) error {
	return c.pc.SetReadDeadline(t)
}

// Send sends a to dst (the group, or a peer for unicast) from Source.
func (c *Socket) Send(a Advert, dst netip.Addr) error {
	src, err := c.Source()
	if err != nil {
		return fmt.Errorf("sending VRRP on %s: %w", c.ifname, err)
	}
	return c.SendFrom(a, src, dst)
}

// SendFrom sends a from src, an address of this host (a configured unicast
// source, say), to dst, out of the Socket's interface with TTL / hop limit
// 255.
func (c *Socket) SendFrom(a Advert, src, dst netip.Addr) error {
	if err := c.sendFrom(a, src, dst); err != nil {
		return fmt.Errorf("sending VRRP on %s from %v to %v: %w", c.ifname, src, dst, err)
	}
	return nil
}

func (c *Socket) sendFrom(a Advert, src, dst netip.Addr) error {
	if s := src.Unmap(); s.IsValid() && s.Is4() != (c.family == 4) {
		return refuse(ErrBadFamily, "source %v on an IPv%d socket", src, c.family)
	}
	b, err := a.Marshal(src, dst)
	if err != nil {
		return err
	}
	to := &net.IPAddr{IP: dst.Unmap().AsSlice()} // no zone: IfIndex says where
	if c.p4 != nil {
		_, err = c.p4.WriteTo(b, &ipv4.ControlMessage{Src: src.Unmap().AsSlice(), IfIndex: c.ifindex}, to)
	} else {
		_, err = c.p6.WriteTo(b, &ipv6.ControlMessage{Src: src.AsSlice(), IfIndex: c.ifindex}, to)
	}
	return err
}

// Source is the address Send sends from: for IPv4 the interface's primary
// address (its first that is not secondary, which the kernel too picks for
// multicast out of it), for IPv6 its link-local address (RFC 5798 5.1.2.2),
// once duplicate address detection is over. It is looked up at most once
// a second.
func (c *Socket) Source() (netip.Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return netip.Addr{}, fmt.Errorf("finding a source address: %w", net.ErrClosed)
	}
	if c.src.IsValid() && time.Since(c.srcAt) < sourceTTL {
		return c.src, nil
	}
	src, err := c.lookupSource()
	if err != nil {
		c.src = netip.Addr{}
		return netip.Addr{}, err
	}
	c.src, c.srcAt = src, time.Now()
	return src, nil
}

// lookupSource dumps the interface's addresses; c.mu is held.
func (c *Socket) lookupSource() (netip.Addr, error) {
	fam := unix.AF_INET
	if c.family == 6 {
		fam = unix.AF_INET6
	}
	link := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: c.ifindex}}
	var addrs []netlink.Addr
	var err error
	for range 3 { // a dump that raced a change is retried
		if addrs, err = c.nl.AddrList(link, fam); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return netip.Addr{}, fmt.Errorf("listing the addresses of %s: %w", c.ifname, err)
	}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP)
		ip = ip.Unmap()
		switch {
		case !ok || ad.IPNet == nil:
		case c.family == 4 && ip.Is4() && ad.Flags&unix.IFA_F_SECONDARY == 0:
			return ip, nil
		case c.family == 6 && ip.Is6() && ip.IsLinkLocalUnicast() &&
			ad.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) == 0:
			return ip, nil
		}
	}
	if c.family == 4 {
		return netip.Addr{}, fmt.Errorf("%s has no IPv4 address", c.ifname)
	}
	return netip.Addr{}, fmt.Errorf("%s has no usable link-local IPv6 address (none, or duplicate address detection not over)", c.ifname)
}

// Close closes the socket; a Read waiting returns an error wrapping
// net.ErrClosed. Closing twice is harmless.
func (c *Socket) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.nl.Close()
	c.nl = nil
	if err := c.pc.Close(); err != nil {
		return fmt.Errorf("closing VRRP socket on %s: %w", c.ifname, err)
	}
	return nil
}

// Receive is Read for the Runner's Conn interface: one packet, with the
// refusal's Reason as a string ("bad_checksum", "bad_ttl", ...).
func (c *Socket) Receive() (Packet, error) {
	r, err := c.Read()
	if err != nil {
		return Packet{}, err
	}
	p := Packet{Src: r.Src, Advert: r.Advert, Err: r.Err}
	if r.Err != nil {
		p.Reason = ReasonOf(r.Err).String()
	}
	return p, nil
}
