package announce_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"

	"github.com/lbdproject/lbd/dataplane/announce"
)

var (
	peerNet6 = netip.MustParsePrefix("2001:2::2/64")
	vip6a    = netip.MustParseAddr("2001:2::10")
	vip6b    = netip.MustParseAddr("2001:2::11")
	// vip6c shares vip6a's solicited-node group: same low 24 bits.
	vip6c    = netip.MustParseAddr("2001:2:1::10")
	notVIP6  = netip.MustParseAddr("2001:2::99")
	allNodes = netip.MustParseAddr("ff02::1")
)

// peer6 is an AF_PACKET socket for IPv6 on the neighbour's end of a topo:
// it sends hand-made solicitations and sees every advertisement.
type peer6 struct {
	t    *testing.T
	c    *packet.Conn
	mac  net.HardwareAddr
	addr netip.Addr
}

func (tp topo) dialPeer6(t *testing.T) *peer6 {
	t.Helper()
	return dialPeer6(t, tp.peerNS, tp.peerIf, peerNet6.Addr())
}

func dialPeer6(t *testing.T, ns, ifname string, addr netip.Addr) *peer6 {
	t.Helper()
	var c *packet.Conn
	var mac net.HardwareAddr
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		mac = ifi.HardwareAddr
		c, err = packet.Listen(ifi, packet.Raw, int(ethernet.EtherTypeIPv6), nil)
		return err
	})
	if err != nil {
		t.Fatalf("opening the neighbour's IPv6 packet socket: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer6{t: t, c: c, mac: mac, addr: addr}
}

// solicitation is a neighbour solicitation from the peer; the zero value
// of each field takes the usual: multicast to the target's group, hop
// limit 255, the peer's address and MAC.
type solicitation struct {
	hopLimit uint8
	unicast  net.HardwareAddr // to the target itself, at this MAC
	dad      bool             // from the unspecified address
}

func (p *peer6) solicit(target netip.Addr, o solicitation) {
	p.t.Helper()
	group, err := ndp.SolicitedNodeMulticast(target)
	if err != nil {
		p.t.Fatal(err)
	}
	g := group.As16()
	f := announce.NDPFrame{
		EthDst: net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}, EthSrc: p.mac,
		Src: p.addr, Dst: group, HopLimit: 255,
		Msg: &ndp.NeighborSolicitation{TargetAddress: target, Options: []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: p.mac}}},
	}
	if o.hopLimit != 0 {
		f.HopLimit = o.hopLimit
	}
	if o.unicast != nil {
		f.EthDst, f.Dst = o.unicast, target
	}
	if o.dad {
		f.Src, f.Msg = netip.IPv6Unspecified(), &ndp.NeighborSolicitation{TargetAddress: target}
	}
	b, err := announce.MarshalNDP(f)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.c.WriteTo(b, &packet.Addr{HardwareAddr: f.EthDst}); err != nil {
		p.t.Fatalf("soliciting %v: %v", target, err)
	}
}

// advert is a neighbour advertisement seen by the peer.
type advert struct {
	f  announce.NDPFrame
	na *ndp.NeighborAdvertisement
}

func (a advert) tlla() net.HardwareAddr {
	for _, o := range a.na.Options {
		if l, ok := o.(*ndp.LinkLayerAddress); ok && l.Direction == ndp.Target {
			return l.Addr
		}
	}
	return nil
}

// read collects the advertisements that others sent until stop says so or
// limit passes; everything else on the wire is skipped.
func (p *peer6) read(limit time.Duration, stop func(all []advert) bool) []advert {
	p.t.Helper()
	var all []advert
	buf := make([]byte, 1514)
	deadline := time.Now().Add(limit)
	for !stop(all) {
		if err := p.c.SetReadDeadline(deadline); err != nil {
			p.t.Fatal(err)
		}
		n, _, err := p.c.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return all
			}
			p.t.Fatalf("reading IPv6: %v", err)
		}
		f, err := announce.ParseNDP(buf[:n])
		if err != nil || f.EthSrc.String() == p.mac.String() {
			continue
		}
		if na, ok := f.Msg.(*ndp.NeighborAdvertisement); ok {
			all = append(all, advert{f, na})
		}
	}
	return all
}

// isAnswer says whether a answers a solicitation from the peer for target.
func (p *peer6) isAnswer(a advert, target netip.Addr) bool {
	return a.na.TargetAddress == target && a.na.Solicited && a.f.Dst == p.addr
}

// resolve solicits target every half second until an answer comes, and
// returns it; it fails the test after several seconds.
func (p *peer6) resolve(target netip.Addr, o solicitation) advert {
	p.t.Helper()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		p.solicit(target, o)
		got := p.read(500*time.Millisecond, func(all []advert) bool {
			return len(all) > 0 && p.isAnswer(all[len(all)-1], target)
		})
		if len(got) > 0 && p.isAnswer(got[len(got)-1], target) {
			return got[len(got)-1]
		}
	}
	p.t.Fatalf("no neighbour advertisement answers a solicitation for %v", target)
	return advert{}
}

// expectNoAnswer sends the solicitation o for target, then a valid one for
// sentinel, a VIP that is answered: once the sentinel's answer is in (and
// a little longer, for packets reordered across CPUs), an answer for
// target would have been too.
func (p *peer6) expectNoAnswer(target netip.Addr, o solicitation, sentinel netip.Addr) {
	p.t.Helper()
	p.solicit(target, o)
	p.solicit(sentinel, solicitation{})
	answered := func(all []advert) bool {
		return slices.ContainsFunc(all, func(a advert) bool { return p.isAnswer(a, sentinel) })
	}
	got := p.read(8*time.Second, answered)
	if !answered(got) {
		p.t.Fatalf("no answer for the sentinel %v", sentinel)
	}
	got = append(got, p.read(300*time.Millisecond, func([]advert) bool { return false })...)
	for _, a := range got {
		// Anything for target but an announcement to all nodes.
		if a.na.TargetAddress == target && (a.na.Solicited || a.f.Dst != allNodes) {
			p.t.Fatalf("got an advertisement for %v after %+v, which must not be answered: %+v", target, o, a.f)
		}
	}
}

// unsolicited returns the unsolicited advertisements from mac among all,
// per target.
func unsolicited(all []advert, mac net.HardwareAddr) map[netip.Addr][]advert {
	out := map[netip.Addr][]advert{}
	for _, a := range all {
		if !a.na.Solicited && a.f.Dst == allNodes && a.f.EthSrc.String() == mac.String() {
			out[a.na.TargetAddress] = append(out[a.na.TargetAddress], a)
		}
	}
	return out
}

// neighMAC is the MAC that the kernel in namespace ns has for addr on dev,
// or "" if none.
func neighMAC(ns string, addr netip.Addr, dev string) string {
	out, _ := exec.Command("ip", "-n", ns, "neigh", "show", addr.String(), "dev", dev).Output()
	f := strings.Fields(string(out))
	if i := slices.Index(f, "lladdr"); i >= 0 && i+1 < len(f) {
		return f[i+1]
	}
	return ""
}

// kernelResolves makes the kernel in namespace ns resolve addr, by sending
// it a UDP datagram, and waits until it has mac for it on dev.
func kernelResolves(t *testing.T, ns string, addr netip.Addr, dev string, mac net.HardwareAddr) {
	t.Helper()
	err := inNetns(ns, func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 9)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the kernel in "+ns+" has "+addr.String()+" at "+mac.String(), func() bool {
		return neighMAC(ns, addr, dev) == mac.String()
	})
}

// groups lists the IPv6 multicast groups joined on dev in this process's
// namespace.
func groups(t *testing.T, dev string) []string {
	t.Helper()
	out, err := exec.Command("ip", "-6", "maddr", "show", "dev", dev).Output()
	if err != nil {
		t.Fatalf("ip -6 maddr show dev %s: %v", dev, err)
	}
	var gs []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "inet6" {
			gs = append(gs, f[1])
		}
	}
	return gs
}
