package vrrp_test

// These tests send real VRRP packets between two network namespaces, A and
// B, joined by a veth pair (vrrpa in A, vrrpb in B). Sockets are opened on
// a goroutine whose locked OS thread entered the namespace, and the thread
// is discarded afterwards (the goroutine exits locked); a socket keeps its
// namespace, so the tests Read and Send from their own goroutine, as the
// daemon would from any.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/internal/testnetns"
)

const (
	ifA, ifB = "vrrpa", "vrrpb"
	vrid     = 51
)

var (
	addrA4 = netip.MustParseAddr("198.18.0.1")
	addrB4 = netip.MustParseAddr("198.18.0.2")
	addrA6 = netip.MustParseAddr("2001:2::1")
	addrB6 = netip.MustParseAddr("2001:2::2")
	vip4a  = netip.MustParseAddr("198.18.0.100")
	vip4b  = netip.MustParseAddr("198.18.0.101")
	vip6   = netip.MustParseAddr("2001:2::100")
)

// link is the veth pair between the namespaces A and B, with link-local
// addresses usable at once (no duplicate address detection).
type link struct{ nsA, nsB string }

func newLink(t *testing.T) link {
	t.Helper()
	l := link{nsA: testnetns.New(t), nsB: testnetns.New(t)}
	testnetns.Run(t, l.nsA, "ip", "link", "add", ifA, "type", "veth", "peer", "name", ifB, "netns", l.nsB)
	for _, side := range []struct {
		ns, ifname string
		a4, a6     netip.Addr
	}{{l.nsA, ifA, addrA4, addrA6}, {l.nsB, ifB, addrB4, addrB6}} {
		testnetns.Run(t, side.ns, "sh", "-c", "echo 0 >/proc/sys/net/ipv6/conf/"+side.ifname+"/accept_dad")
		testnetns.Run(t, side.ns, "ip", "addr", "add", side.a4.String()+"/24", "dev", side.ifname)
		testnetns.Run(t, side.ns, "ip", "addr", "add", side.a6.String()+"/64", "dev", side.ifname, "nodad")
	}
	testnetns.Run(t, l.nsA, "ip", "link", "set", ifA, "up")
	testnetns.Run(t, l.nsB, "ip", "link", "set", ifB, "up")
	return l
}

// linkLocal waits for the interface's link-local address and returns it.
func linkLocal(t *testing.T, ns, ifname string) netip.Addr {
	t.Helper()
	var ll netip.Addr
	eventually(t, "a link-local address on "+ifname, func() bool {
		out := testnetns.Run(t, ns, "ip", "-6", "-o", "addr", "show", "dev", ifname, "scope", "link")
		for _, f := range strings.Fields(out) {
			if p, err := netip.ParsePrefix(f); err == nil && !strings.Contains(out, "tentative") {
				ll = p.Addr()
				return true
			}
		}
		return false
	})
	return ll
}

// inNetns runs fn on a fresh OS thread inside the named namespace; the
// thread is discarded afterwards.
func inNetns(ns string, fn func() error) error {
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering netns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func listenIn(t *testing.T, ns, ifname string, family int) *vrrp.Socket {
	t.Helper()
	var s *vrrp.Socket
	if err := inNetns(ns, func() (err error) { s, err = vrrp.Listen(ifname, family); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// readUntil reads packets until one satisfies ok, and returns it with
// those before it; it fails the test after limit.
func readUntil(t *testing.T, s *vrrp.Socket, limit time.Duration, ok func(vrrp.Received) bool) (vrrp.Received, []vrrp.Received) {
	t.Helper()
	if err := s.SetReadDeadline(time.Now().Add(limit)); err != nil {
		t.Fatal(err)
	}
	var before []vrrp.Received
	for {
		r, err := s.Read()
		if err != nil {
			t.Fatalf("reading (after %d other packets: %+v): %v", len(before), before, err)
		}
		if ok(r) {
			return r, before
		}
		before = append(before, r)
	}
}

func isVRID(r vrrp.Received) bool { return r.Err == nil && r.Advert.VRID == vrid }

// eventually polls cond every 50ms for up to 20s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func sameAdvert(a, b vrrp.Advert) bool {
	return a.Version == b.Version && a.VRID == b.VRID && a.Priority == b.Priority && a.Interval == b.Interval &&
		slices.Equal(a.Addrs, b.Addrs) && a.AuthType == b.AuthType && a.AuthData == b.AuthData
}

func TestSendAndReadBetweenNamespaces(t *testing.T) {
	l := newLink(t)
	llA, llB := linkLocal(t, l.nsA, ifA), linkLocal(t, l.nsB, ifB)
	v2 := vrrp.Advert{Version: 2, VRID: vrid, Priority: 150, Interval: time.Second, Addrs: []netip.Addr{vip4a, vip4b}}
	v2.SetPassword("secret")
	v3 := vrrp.Advert{Version: 3, VRID: vrid, Priority: 150, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{vip4a, vip4b}}
	v36 := vrrp.Advert{Version: 3, VRID: vrid, Priority: 150, Interval: 20 * time.Millisecond, Addrs: []netip.Addr{vip6}}
	for _, family := range []int{4, 6} {
		a, b := listenIn(t, l.nsA, ifA, family), listenIn(t, l.nsB, ifB, family)
		srcA, srcB, uniA, uniB, group := addrA4, addrB4, addrA4, addrB4, vrrp.Group4
		adverts := []vrrp.Advert{v2, v3}
		if family == 6 {
			srcA, srcB, uniA, uniB, group = llA, llB, addrA6, addrB6, vrrp.Group6
			adverts = []vrrp.Advert{v36}
		}
		type path struct {
			name           string
			from, to       *vrrp.Socket
			src, dst, back netip.Addr
		}
		paths := []path{
			{"A to B multicast", a, b, srcA, group, group},
			{"B to A multicast", b, a, srcB, group, group},
			{"A to B unicast", a, b, srcA, uniB, uniB},
			{"B to A unicast", b, a, srcB, uniA, uniA},
		}
		if family == 6 {
			paths = append(paths, path{"A to B link-local unicast", a, b, srcA, llB, llB})
		}
		for _, adv := range adverts {
			for _, c := range paths {
				t.Run(fmt.Sprintf("v%d IPv%d %s", adv.Version, family, c.name), func(t *testing.T) {
					if src, err := c.from.Source(); err != nil || src != c.src {
						t.Errorf("Source() = %v, %v; want %v", src, err, c.src)
					}
					adv.Priority++ // tells this advert from earlier ones
					if err := c.from.Send(adv, c.dst); err != nil {
						t.Fatal(err)
					}
					r, _ := readUntil(t, c.to, 10*time.Second, func(r vrrp.Received) bool {
						return isVRID(r) && r.Advert.Priority == adv.Priority
					})
					if !sameAdvert(r.Advert, adv) || r.Src != c.src || r.Dst != c.back || r.TTL != 255 {
						t.Errorf("read %+v, want %+v from %v to %v with TTL 255", r, adv, c.src, c.back)
					}
				})
			}
		}
	}
}

// rawSender opens a plain raw VRRP socket in ns, sending out of ifname
// with the given TTL / hop limit, from src; it sends b to dst as given,
// valid or not.
func rawSender(t *testing.T, ns, ifname string, ttl int, src netip.Addr) func(b []byte, dst netip.Addr) error {
	t.Helper()
	var send func(b []byte, dst netip.Addr) error
	err := inNetns(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if src.Is4() {
			pc, err := net.ListenPacket("ip4:112", "0.0.0.0")
			if err != nil {
				return err
			}
			t.Cleanup(func() { pc.Close() })
			p := ipv4.NewPacketConn(pc)
			if err := errors.Join(p.SetTTL(ttl), p.SetMulticastTTL(ttl), p.SetMulticastInterface(ifi)); err != nil {
				return err
			}
			send = func(b []byte, dst netip.Addr) error {
				_, err := p.WriteTo(b, &ipv4.ControlMessage{Src: src.AsSlice(), IfIndex: ifi.Index}, &net.IPAddr{IP: dst.AsSlice()})
				return err
			}
			return nil
		}
		pc, err := net.ListenPacket("ip6:112", "::")
		if err != nil {
			return err
		}
		t.Cleanup(func() { pc.Close() })
		p := ipv6.NewPacketConn(pc)
		if err := errors.Join(p.SetHopLimit(ttl), p.SetMulticastHopLimit(ttl), p.SetMulticastInterface(ifi)); err != nil {
			return err
		}
		send = func(b []byte, dst netip.Addr) error {
			_, err := p.WriteTo(b, &ipv6.ControlMessage{Src: src.AsSlice(), IfIndex: ifi.Index}, &net.IPAddr{IP: dst.AsSlice()})
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("opening a raw socket in %s: %v", ns, err)
	}
	return send
}

func TestReadReturnsRefusedPackets(t *testing.T) {
	l := newLink(t)
	llB := linkLocal(t, l.nsB, ifB)
	for _, c := range []struct {
		family   int
		src, dst netip.Addr
		adv      vrrp.Advert
	}{
		{4, addrB4, vrrp.Group4, vrrp.Advert{Version: 2, VRID: vrid, Priority: 100, Interval: time.Second, Addrs: []netip.Addr{vip4a}}},
		{4, addrB4, addrA4, vrrp.Advert{Version: 3, VRID: vrid, Priority: 100, Interval: time.Second, Addrs: []netip.Addr{vip4a}}},
		{6, llB, vrrp.Group6, vrrp.Advert{Version: 3, VRID: vrid, Priority: 100, Interval: time.Second, Addrs: []netip.Addr{vip6}}},
		{6, llB, addrA6, vrrp.Advert{Version: 3, VRID: vrid, Priority: 100, Interval: time.Second, Addrs: []netip.Addr{vip6}}},
	} {
		t.Run(fmt.Sprintf("v%d to %v", c.adv.Version, c.dst), func(t *testing.T) {
			a := listenIn(t, l.nsA, ifA, c.family)
			hop64 := rawSender(t, l.nsB, ifB, 64, c.src)
			hop255 := rawSender(t, l.nsB, ifB, 255, c.src)
			good, err := c.adv.Marshal(c.src, c.dst)
			if err != nil {
				t.Fatal(err)
			}
			badSum := slices.Clone(good)
			badSum[7] ^= 1
			if err := errors.Join(hop64(good, c.dst), hop255(badSum, c.dst), hop255(good[:5], c.dst), hop255(good, c.dst)); err != nil {
				t.Fatal(err)
			}
			want := []struct {
				reason vrrp.Reason
				ttl    int
				advert bool
			}{{vrrp.ErrBadTTL, 64, true}, {vrrp.ErrBadChecksum, 255, false}, {vrrp.ErrBadLength, 255, false}, {0, 255, true}}
			for i, w := range want {
				r, before := readUntil(t, a, 10*time.Second, func(vrrp.Received) bool { return true })
				if len(before) != 0 {
					t.Fatalf("unexpected packets: %+v", before)
				}
				if vrrp.ReasonOf(r.Err) != w.reason || r.TTL != w.ttl || r.Src != c.src || r.Dst != c.dst ||
					(w.advert && !sameAdvert(r.Advert, c.adv)) || (!w.advert && r.Advert.Version != 0) {
					t.Errorf("packet %d: %+v; want reason %v, TTL %d, advert %v, from %v to %v", i, r, w.reason, w.ttl, w.advert, c.src, c.dst)
				}
			}
		})
	}
}

func TestCloseWhileReading(t *testing.T) {
	l := newLink(t)
	s := listenIn(t, l.nsA, ifA, 4)
	done := make(chan error, 1)
	go func() {
		_, err := s.Read()
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // likely blocked in Read by now; either way Read must fail
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read did not return within 10s of Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := s.Send(vrrp.Advert{Version: 3, VRID: 1, Interval: time.Second}, vrrp.Group4); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Send after Close = %v, want net.ErrClosed", err)
	}
}

func TestSourceAddress(t *testing.T) {
	l := newLink(t)
	a4 := listenIn(t, l.nsA, ifA, 4)
	// A secondary address in the same subnet, and a VIP as keepalived adds
	// it, come after the primary.
	testnetns.Run(t, l.nsA, "ip", "addr", "add", "198.18.0.50/24", "dev", ifA)
	testnetns.Run(t, l.nsA, "ip", "addr", "add", vip4a.String()+"/32", "dev", ifA)
	time.Sleep(sourceRecheck)
	if src, err := a4.Source(); src != addrA4 || err != nil {
		t.Errorf("IPv4 Source() = %v, %v; want %v", src, err, addrA4)
	}

	// An interface without addresses: the error says so.
	testnetns.Run(t, l.nsB, "ip", "addr", "flush", "dev", ifB)
	testnetns.Run(t, l.nsB, "sh", "-c", "echo 1 >/proc/sys/net/ipv6/conf/"+ifB+"/disable_ipv6")
	for family, want := range map[int]string{4: "no IPv4 address", 6: "no usable link-local"} {
		s := listenIn(t, l.nsB, ifB, family)
		if src, err := s.Source(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("IPv%d Source() without addresses = %v, %v; want an error saying %q", family, src, err, want)
		}
	}
}

// sourceRecheck is longer than the time Source reuses an address for.
const sourceRecheck = 1100 * time.Millisecond

func TestListenErrors(t *testing.T) {
	l := newLink(t)
	for _, c := range []struct {
		ifname string
		family int
		want   string
	}{
		{"nosuch0", 4, "listening for VRRP on nosuch0: "},
		{ifA, 5, "address family 5"},
	} {
		err := inNetns(l.nsA, func() error {
			s, err := vrrp.Listen(c.ifname, c.family)
			if err == nil {
				s.Close()
			}
			return err
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Listen(%q, %d) = %v, want an error with %q", c.ifname, c.family, err, c.want)
		}
	}
}

// TestSeenOnlyWhereSent: an advert is not looped back to the sender's
// namespace (multicast loopback is off), and a socket bound to another
// interface does not see it.
func TestSeenOnlyWhereSent(t *testing.T) {
	l := newLink(t)
	testnetns.Run(t, l.nsA, "ip", "link", "add", "other0", "type", "veth", "peer", "name", "other1")
	testnetns.Run(t, l.nsA, "ip", "link", "set", "other0", "up")
	testnetns.Run(t, l.nsA, "ip", "link", "set", "other1", "up")
	other := listenIn(t, l.nsA, "other0", 4)
	a, a2 := listenIn(t, l.nsA, ifA, 4), listenIn(t, l.nsA, ifA, 4)
	b := listenIn(t, l.nsB, ifB, 4)
	adv := vrrp.Advert{Version: 3, VRID: vrid, Priority: 1, Interval: time.Second}
	if err := b.Send(adv, vrrp.Group4); err != nil {
		t.Fatal(err)
	}
	readUntil(t, a, 10*time.Second, isVRID)
	readUntil(t, a2, 10*time.Second, isVRID)
	if err := a.Send(adv, vrrp.Group4); err != nil {
		t.Fatal(err)
	}
	readUntil(t, b, 10*time.Second, isVRID)
	for name, s := range map[string]*vrrp.Socket{"the sender": a, "another socket on vrrpa": a2, "the socket on other0": other} {
		if err := s.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("%s read %+v, %v; want nothing", name, r, err)
		}
	}
}
