package announce

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

var (
	ourMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	askerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	vip      = netip.MustParseAddr("192.0.2.10")
	asker    = netip.MustParseAddr("192.0.2.2")
	other    = netip.MustParseAddr("192.0.2.99")
)

// frame builds an Ethernet frame carrying an ARP packet.
func frame(t *testing.T, dst, src net.HardwareAddr, op arp.Operation, sha net.HardwareAddr, spa netip.Addr, tha net.HardwareAddr, tpa netip.Addr) []byte {
	t.Helper()
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := p.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	f := ethernet.Frame{Destination: dst, Source: src, EtherType: ethernet.EtherTypeARP, Payload: pb}
	fb, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return fb
}

func TestDecideAnswersOnlyWhoHasForItsVIPs(t *testing.T) {
	bcast, zero := ethernet.Broadcast, make(net.HardwareAddr, 6)
	req, rep := arp.OperationRequest, arp.OperationReply
	vips := vipSet{vip, netip.MustParseAddr("192.0.2.11")}
	tagged := func() []byte {
		p, _ := arp.NewPacket(req, askerMAC, asker, zero, vip)
		pb, _ := p.MarshalBinary()
		f := ethernet.Frame{Destination: bcast, Source: askerMAC, VLAN: &ethernet.VLAN{ID: 100}, EtherType: ethernet.EtherTypeARP, Payload: pb}
		b, _ := f.MarshalBinary()
		return b
	}()
	ipv4Frame := func() []byte {
		f := ethernet.Frame{Destination: bcast, Source: askerMAC, EtherType: ethernet.EtherTypeIPv4, Payload: make([]byte, 46)}
		b, _ := f.MarshalBinary()
		return b
	}()

	for _, tc := range []struct {
		name  string
		frame []byte
		want  verdict
	}{
		{"broadcast who-has for a VIP", frame(t, bcast, askerMAC, req, askerMAC, asker, zero, vip), answer},
		{"unicast who-has for a VIP (neighbour refresh)", frame(t, ourMAC, askerMAC, req, askerMAC, asker, zero, vip), answer},
		{"RFC 5227 probe for a VIP", frame(t, bcast, askerMAC, req, askerMAC, netip.IPv4Unspecified(), zero, vip), answer},
		{"who-has for another address", frame(t, bcast, askerMAC, req, askerMAC, asker, zero, other), ignoreNotVIP},
		{"who-has unicast to another MAC", frame(t, askerMAC, askerMAC, req, askerMAC, asker, zero, vip), ignoreNotForUs},
		{"our own gratuitous request", frame(t, bcast, ourMAC, req, ourMAC, vip, zero, vip), ignoreFromSelf},
		{"our own gratuitous reply", frame(t, bcast, ourMAC, rep, ourMAC, vip, ourMAC, vip), ignoreFromSelf},
		{"our MAC as sender behind another source", frame(t, bcast, askerMAC, req, ourMAC, asker, zero, vip), ignoreFromSelf},
		{"a reply about another address", frame(t, bcast, askerMAC, rep, askerMAC, asker, askerMAC, asker), ignoreNotRequest},
		{"someone's gratuitous ARP for its own address", frame(t, bcast, askerMAC, req, askerMAC, asker, zero, asker), ignoreAnnouncement},
		{"another host's gratuitous ARP for our VIP", frame(t, bcast, askerMAC, req, askerMAC, vip, zero, vip), conflict},
		{"another host's reply from our VIP", frame(t, ourMAC, askerMAC, rep, askerMAC, vip, ourMAC, asker), conflict},
		{"group address as sender", frame(t, bcast, askerMAC, req, bcast, asker, zero, vip), ignoreMalformed},
		{"VLAN-tagged frame", tagged, ignoreMalformed},
		{"not ARP", ipv4Frame, ignoreMalformed},
		{"truncated ARP", frame(t, bcast, askerMAC, req, askerMAC, asker, zero, vip)[:20], ignoreMalformed},
		{"short frame", []byte{1, 2, 3}, ignoreMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, p := decide(tc.frame, ourMAC, vips)
			if got != tc.want {
				t.Fatalf("decide = %v, want %v", got, tc.want)
			}
			if got == answer && p == nil || got == conflict && p == nil {
				t.Fatalf("decide = %v without a packet", got)
			}
		})
	}
}

func TestDecideReplyIsUnicastToTheAskerWithOurMAC(t *testing.T) {
	_, p := decide(frame(t, ethernet.Broadcast, askerMAC, arp.OperationRequest, askerMAC, asker, make(net.HardwareAddr, 6), vip), ourMAC, vipSet{vip})
	want := &arp.Packet{
		HardwareType: 1, ProtocolType: uint16(ethernet.EtherTypeIPv4), HardwareAddrLength: 6, IPLength: 4,
		Operation:          arp.OperationReply,
		SenderHardwareAddr: ourMAC, SenderIP: vip,
		TargetHardwareAddr: askerMAC, TargetIP: asker,
	}
	// fmt prints the MACs and addresses through their String methods.
	if p == nil || fmt.Sprint(*p) != fmt.Sprint(*want) {
		t.Fatalf("reply = %+v, want %+v", p, want)
	}
}

func TestGratuitousPacketsAreARequestAndAReplyFromTheVIP(t *testing.T) {
	ps, err := gratuitousPackets(ourMAC, vip)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("got %d packets, want 2", len(ps))
	}
	for i, want := range []struct {
		op  arp.Operation
		tha net.HardwareAddr
	}{{arp.OperationRequest, make(net.HardwareAddr, 6)}, {arp.OperationReply, ourMAC}} {
		p := ps[i]
		if p.Operation != want.op || p.SenderIP != vip || p.TargetIP != vip ||
			p.SenderHardwareAddr.String() != ourMAC.String() || p.TargetHardwareAddr.String() != want.tha.String() {
			t.Errorf("packet %d = %+v, want %v from %v/%v with target MAC %v", i, p, want.op, vip, ourMAC, want.tha)
		}
		// Our own reader must never answer these.
		pb, _ := p.MarshalBinary()
		fb, _ := (&ethernet.Frame{Destination: ethernet.Broadcast, Source: ourMAC, EtherType: ethernet.EtherTypeARP, Payload: pb}).MarshalBinary()
		if v, _ := decide(fb, ourMAC, vipSet{vip}); v == answer || v == conflict {
			t.Errorf("decide(own gratuitous %v) = %v", p.Operation, v)
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestSetKeepsBothFamiliesSortedAndDropsEmptyInterfaces(t *testing.T) {
	a := New(Options{Logger: quietLogger()})
	v6, ll := netip.MustParseAddr("2001:2::10"), netip.MustParseAddr("fe80::10")
	in := map[string][]netip.Addr{
		"eth0": {v6, netip.MustParseAddr("192.0.2.11"), vip, vip, netip.MustParseAddr("::ffff:192.0.2.12"), ll.WithZone("eth0")},
		"eth1": {netip.MustParseAddr("ff02::1"), netip.IPv6Unspecified(), netip.IPv4Unspecified(), {}},
		"eth2": nil,
		"eth3": {v6},
	}
	a.Set(in)
	in["eth0"][0] = other // the caller may reuse its map
	want := map[string][]netip.Addr{
		"eth0": {vip, netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.12"), v6, ll},
		"eth3": {v6},
	}
	if !maps.EqualFunc(a.want, want, slices.Equal) {
		t.Fatalf("want = %v, expected %v", a.want, want)
	}
}

func TestSetWithTheSameSetDoesNotWakeRun(t *testing.T) {
	a := New(Options{Logger: quietLogger()})
	set := map[string][]netip.Addr{"eth0": {vip}}
	a.Set(set)
	<-a.wake
	a.Set(map[string][]netip.Addr{"eth0": {vip, vip}})
	select {
	case <-a.wake:
		t.Fatal("Set with an unchanged set woke Run")
	default:
	}
	a.Set(nil)
	select {
	case <-a.wake:
	default:
		t.Fatal("Set with a changed set did not wake Run")
	}
}

func TestNewFillsDefaultsAndSortsTheSchedule(t *testing.T) {
	a := New(Options{})
	if !slices.Equal(a.gratuitous, []time.Duration{0, time.Second, 2 * time.Second}) || a.recheck != DefaultRecheck || a.log == nil {
		t.Fatalf("defaults: gratuitous %v, recheck %v", a.gratuitous, a.recheck)
	}
	a = New(Options{Gratuitous: []time.Duration{3 * time.Second, -time.Second, time.Second}, Recheck: -1})
	if !slices.Equal(a.gratuitous, []time.Duration{0, time.Second, 3 * time.Second}) || a.recheck != DefaultRecheck {
		t.Fatalf("normalised: gratuitous %v, recheck %v", a.gratuitous, a.recheck)
	}
}

func TestRunTwiceIsRefusedAndRunReturnsOnCancel(t *testing.T) {
	a := New(Options{Logger: quietLogger()})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	// Wait until the first Run has claimed the Announcer.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		a.mu.Lock()
		running := a.running
		a.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
	}
	if err := a.Run(ctx); err == nil {
		t.Error("second Run returned nil, want an error")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestStateStrings(t *testing.T) {
	for s, want := range map[State]string{Failed: "failed", Down: "down", Answering: "answering", State(9): "unknown"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}
