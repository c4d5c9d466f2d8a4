package announce_test

// The IPv6 twins of the ARP tests in netns_linux_test.go, on the same
// namespaces and veth pairs (see there).

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/announce"
)

func TestSolicitationForAnIPv6VIPGetsTheInterfaceMAC(t *testing.T) {
	needNetns(t)
	// lbd's end has no IPv6 address at all, not even a link-local one.
	tp := newTopo(t, topoOpts{noLbdIPv6: true})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6b, vip1, vip6a}})
	st := waitState(t, a, tp.lbdIf, announce.Answering)
	mac := tp.lbdMAC(t)
	if want := []netip.Addr{vip1, vip6a, vip6b}; st.HardwareAddr.String() != mac.String() || !slices.Equal(st.VIPs, want) || st.Err != nil {
		t.Errorf("status = %+v, want %v answering for %v", st, mac, want)
	}
	for _, g := range []string{"ff02::1:ff00:10", "ff02::1:ff00:11"} {
		if !slices.Contains(groups(t, tp.lbdIf), g) {
			t.Errorf("%s has not joined %s: %v", tp.lbdIf, g, groups(t, tp.lbdIf))
		}
	}
	idx := ifindex(t, tp.lbdIf)
	if arp, v6 := packetSockets(t)[idx], packetSocketsOf(t, "86dd")[idx]; arp != 1 || v6 != 1 {
		t.Errorf("%d ARP and %d IPv6 packet sockets on %s, want one each", arp, v6, tp.lbdIf)
	}

	p := tp.dialPeer6(t)
	r := p.resolve(vip6a, solicitation{})
	if r.f.EthDst.String() != p.mac.String() || r.f.EthSrc.String() != mac.String() || r.f.Src != vip6a || r.f.Dst != p.addr ||
		r.f.HopLimit != 255 || !r.na.Solicited || !r.na.Override || r.na.Router || r.tlla().String() != mac.String() {
		t.Errorf("answer = %+v %+v; want a solicited, overriding advertisement from %v at %v, unicast to the asker %v at %v, hop limit 255",
			r.f, *r.na, vip6a, mac, p.addr, p.mac)
	}
	// A reachability probe: unicast to the VIP at the MAC the peer learnt.
	p.resolve(vip6a, solicitation{unicast: mac})

	// The neighbour's own kernel resolves the VIP the same way, and its
	// traffic reaches this namespace, where the VIP is bound on lo (as on
	// lbd's dummy link).
	run(t, "ip", "link", "set", "lo", "up")
	run(t, "ip", "-6", "addr", "add", vip6b.String()+"/128", "dev", "lo", "nodad")
	t.Cleanup(func() { runQuiet("ip", "-6", "addr", "del", vip6b.String()+"/128", "dev", "lo") })
	l, err := net.ListenUDP("udp6", net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip6b, 9)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	kernelResolves(t, tp.peerNS, vip6b, tp.peerIf, mac)
	l.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, from, err := l.ReadFromUDPAddrPort(make([]byte, 16)); err != nil || from.Addr() != peerNet6.Addr() {
		t.Errorf("datagram to %v: from %v, %v; want one from %v", vip6b, from, err, peerNet6.Addr())
	}

	// ARP for the IPv4 VIP on the same interface goes on as before.
	if r := tp.dialPeer(t).resolve(vip1); r.p.SenderHardwareAddr.String() != mac.String() {
		t.Errorf("ARP reply for %v carries %v, want %v", vip1, r.p.SenderHardwareAddr, mac)
	}
}

func TestSolicitationsNotForAVIPOrFromBeyondARouterGetNoAnswer(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6a, vip6b}})
	waitState(t, a, tp.lbdIf, announce.Answering)
	mac := tp.lbdMAC(t)
	p := tp.dialPeer6(t)
	p.resolve(vip6b, solicitation{})

	for _, tc := range []struct {
		name   string
		target netip.Addr
		o      solicitation
	}{
		{"another address", notVIP6, solicitation{}},
		{"hop limit 254", vip6a, solicitation{hopLimit: 254}},
		{"hop limit 64", vip6a, solicitation{hopLimit: 64}},
		{"hop limit 64, unicast", vip6a, solicitation{hopLimit: 64, unicast: mac}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.t = t
			p.expectNoAnswer(tc.target, tc.o, vip6b)
		})
	}
	p.t = t

	// Duplicate address detection for a VIP: the VIP is taken, says an
	// advertisement to all nodes, not marked solicited.
	p.solicit(vip6a, solicitation{dad: true})
	forVIP := func(all []advert) []advert {
		return slices.DeleteFunc(slices.Clone(all), func(a advert) bool { return a.na.TargetAddress != vip6a })
	}
	got := forVIP(p.read(5*time.Second, func(all []advert) bool { return len(forVIP(all)) > 0 }))
	got = append(got, forVIP(p.read(300*time.Millisecond, func([]advert) bool { return false }))...)
	if len(got) != 1 || got[0].f.Dst != allNodes || got[0].na.Solicited || !got[0].na.Override || got[0].tlla().String() != mac.String() {
		t.Errorf("answers to duplicate address detection: %+v, want one overriding advertisement of %v at %v to %v", got, vip6a, mac, allNodes)
	}
}

func TestRemovedIPv6VIPLeavesItsGroupAndIsNoLongerAnswered(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6a, vip6b, vip6c, vip1}})
	waitState(t, a, tp.lbdIf, announce.Answering)
	p := tp.dialPeer6(t)
	p.resolve(vip6a, solicitation{})
	joined := func(g string) bool { return slices.Contains(groups(t, tp.lbdIf), g) }
	waitGroups := func(what string, want map[string]bool) {
		t.Helper()
		eventually(t, what, func() bool {
			for g, in := range want {
				if joined(g) != in {
					return false
				}
			}
			return true
		})
	}
	waitGroups("both groups are joined", map[string]bool{"ff02::1:ff00:10": true, "ff02::1:ff00:11": true})

	// vip6c still needs the group it shares with vip6a.
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6b, vip6c, vip1}})
	eventually(t, vip6a.String()+" is no longer in the status", func() bool {
		st, _ := statusOf(a, tp.lbdIf)
		return !slices.Contains(st.VIPs, vip6a)
	})
	p.expectNoAnswer(vip6a, solicitation{}, vip6b)
	p.resolve(vip6c, solicitation{})
	waitGroups("the shared group stays", map[string]bool{"ff02::1:ff00:10": true, "ff02::1:ff00:11": true})

	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6b, vip1}})
	waitGroups("the group of the last VIP in it is left", map[string]bool{"ff02::1:ff00:10": false, "ff02::1:ff00:11": true})

	// Without IPv6 VIPs the IPv6 socket is closed and its groups left;
	// ARP goes on.
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	idx := ifindex(t, tp.lbdIf)
	eventually(t, "the IPv6 socket is closed", func() bool { return packetSocketsOf(t, "86dd")[idx] == 0 })
	waitGroups("every group is left", map[string]bool{"ff02::1:ff00:10": false, "ff02::1:ff00:11": false})
	p.solicit(vip6b, solicitation{})
	for _, a := range p.read(time.Second, func([]advert) bool { return false }) {
		if a.na.TargetAddress == vip6b {
			t.Errorf("advertisement after the last IPv6 VIP went: %+v", a.f)
		}
	}
	tp.dialPeer(t).resolve(vip1)
}

func TestUnsolicitedAdvertisementsWhenTheInterfaceComesUp(t *testing.T) {
	needNetns(t)
	schedule := []time.Duration{0, 300 * time.Millisecond}
	a := announce.New(announce.Options{Logger: testLogger(t), Gratuitous: schedule, Recheck: recheck})
	start(t, a)
	tp := newTopo(t, topoOpts{lbdDown: true})
	p := tp.dialPeer6(t)
	mac := tp.lbdMAC(t)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6a}})
	waitState(t, a, tp.lbdIf, announce.Down)

	announced := func(what string, vip netip.Addr) {
		t.Helper()
		got := unsolicited(p.read(10*time.Second, func(all []advert) bool {
			return len(unsolicited(all, mac)[vip]) >= len(schedule)
		}), mac)
		if len(got[vip]) != len(schedule) {
			t.Fatalf("%s: saw %d unsolicited advertisements for %v, want %d", what, len(got[vip]), vip, len(schedule))
		}
		for _, u := range got[vip] {
			if u.f.EthDst.String() != "33:33:00:00:00:01" || u.f.Src != vip || u.f.HopLimit != 255 || !u.na.Override || u.tlla().String() != mac.String() {
				t.Errorf("%s: %+v %+v; want an overriding advertisement of %v at %v, to all nodes, hop limit 255", what, u.f, *u.na, vip, mac)
			}
		}
		for _, other := range []netip.Addr{vip6a, vip6b} {
			if other != vip && len(got[other]) != 0 {
				t.Errorf("%s: %v, announced before, was announced again", what, other)
			}
		}
	}
	run(t, "ip", "link", "set", tp.lbdIf, "up")
	announced("interface came up", vip6a)
	waitState(t, a, tp.lbdIf, announce.Answering)

	// A new VIP is announced, and only it.
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip6a, vip6b}})
	announced("VIP added", vip6b)

	run(t, "ip", "link", "set", tp.lbdIf, "down")
	waitState(t, a, tp.lbdIf, announce.Down)
	run(t, "ip", "link", "set", tp.lbdIf, "up")
	got := unsolicited(p.read(10*time.Second, func(all []advert) bool {
		u := unsolicited(all, mac)
		return len(u[vip6a]) >= len(schedule) && len(u[vip6b]) >= len(schedule)
	}), mac)
	if len(got[vip6a]) != len(schedule) || len(got[vip6b]) != len(schedule) {
		t.Errorf("interface came back up: %d and %d unsolicited advertisements, want %d each", len(got[vip6a]), len(got[vip6b]), len(schedule))
	}
}

// pairTopo is the two boxes of a failover pair on one LAN: two veth pairs
// from this namespace (lbdA and lbdB, each with its MAC) to a bridge in
// the neighbour's namespace, which holds the neighbour's addresses.
type pairTopo struct {
	peerNS, lbdA, lbdB, bridge string
}

func newPairTopo(t *testing.T) pairTopo {
	t.Helper()
	n := topoSeq.Add(1)
	tp := pairTopo{
		peerNS: fmt.Sprintf("lbdndp-%d-%d", os.Getpid(), n),
		lbdA:   fmt.Sprintf("lbd%da", n), lbdB: fmt.Sprintf("lbd%db", n), bridge: "br0",
	}
	run(t, "ip", "netns", "add", tp.peerNS)
	t.Cleanup(func() { runQuiet("ip", "netns", "del", tp.peerNS) })
	run(t, "ip", "-n", tp.peerNS, "link", "add", tp.bridge, "type", "bridge")
	for _, lbd := range []string{tp.lbdA, tp.lbdB} {
		port := "p" + lbd
		run(t, "ip", "link", "add", lbd, "type", "veth", "peer", "name", port, "netns", tp.peerNS)
		t.Cleanup(func() { runQuiet("ip", "link", "del", lbd) })
		run(t, "ip", "-n", tp.peerNS, "link", "set", port, "master", tp.bridge, "up")
		run(t, "ip", "link", "set", lbd, "up")
	}
	run(t, "ip", "-n", tp.peerNS, "addr", "add", peerNet.String(), "dev", tp.bridge)
	run(t, "ip", "-n", tp.peerNS, "addr", "add", peerNet6.String(), "dev", tp.bridge, "nodad")
	run(t, "ip", "-n", tp.peerNS, "link", "set", tp.bridge, "up")
	// The bridge takes IPv6 multicast (the route to ff00::/8) only once
	// it has carrier, a moment after its ports; until then the kernel
	// drops unsolicited advertisements to all nodes.
	eventually(t, "the bridge has its IPv6 multicast route", func() bool {
		out, _ := exec.Command("ip", "-n", tp.peerNS, "-6", "route", "show", "table", "local", "dev", tp.bridge).Output()
		return strings.Contains(string(out), "multicast ff00::/8")
	})
	return tp
}

// The failover of a pair: the VIPs move from one box to the other, and
// the neighbours follow the new master's unsolicited advertisements (and
// gratuitous ARP) at once, without asking.
func TestNeighboursFollowTheVIPsToTheNewMaster(t *testing.T) {
	needNetns(t)
	tp := newPairTopo(t)
	opts := announce.Options{Logger: testLogger(t), Gratuitous: []time.Duration{0, 200 * time.Millisecond}, Recheck: recheck}
	master, backup := announce.New(opts), announce.New(opts)
	start(t, master)
	start(t, backup)
	macA, macB := macOf(t, tp.lbdA), macOf(t, tp.lbdB)
	vips := []netip.Addr{vip1, vip6a}

	master.Set(map[string][]netip.Addr{tp.lbdA: vips})
	waitState(t, master, tp.lbdA, announce.Answering)
	for _, v := range vips {
		kernelResolves(t, tp.peerNS, v, tp.bridge, macA)
	}

	p := dialPeer6(t, tp.peerNS, tp.bridge, peerNet6.Addr())
	master.Set(nil)
	backup.Set(map[string][]netip.Addr{tp.lbdB: vips})
	seen := unsolicited(p.read(5*time.Second, func(all []advert) bool { return len(unsolicited(all, macB)[vip6a]) > 0 }), macB)
	if len(seen[vip6a]) == 0 {
		t.Fatalf("no unsolicited advertisement of %v from the new master", vip6a)
	}
	for _, v := range vips {
		eventually(t, "the neighbour has "+v.String()+" at the new master's "+macB.String(), func() bool {
			return neighMAC(tp.peerNS, v, tp.bridge) == macB.String()
		})
	}
}

func macOf(t *testing.T, name string) net.HardwareAddr {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.HardwareAddr
}
