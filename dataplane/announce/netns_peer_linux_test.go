package announce_test

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"

	"github.com/lbdproject/lbd/dataplane/announce"
)

// peer is an ARP socket on the neighbour's end of a topo.
type peer struct {
	t   *testing.T
	c   *arp.Client
	mac net.HardwareAddr
}

func (tp topo) dialPeer(t *testing.T) *peer {
	t.Helper()
	var c *arp.Client
	err := inNetns(tp.peerNS, func() error {
		ifi, err := net.InterfaceByName(tp.peerIf)
		if err != nil {
			return err
		}
		c, err = arp.Dial(ifi)
		return err
	})
	if err != nil {
		t.Fatalf("opening the neighbour's ARP socket: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, c: c, mac: c.HardwareAddr()}
}

type seen struct {
	p *arp.Packet
	f *ethernet.Frame
}

// read collects packets until stop says so or limit passes.
func (p *peer) read(limit time.Duration, stop func(all []seen) bool) []seen {
	p.t.Helper()
	var all []seen
	deadline := time.Now().Add(limit)
	for !stop(all) {
		if err := p.c.SetReadDeadline(deadline); err != nil {
			p.t.Fatal(err)
		}
		pkt, f, err := p.c.Read()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return all
			}
			p.t.Fatalf("reading ARP: %v", err)
		}
		all = append(all, seen{pkt, f})
	}
	return all
}

func (p *peer) ask(target netip.Addr) {
	p.t.Helper()
	if err := p.c.Request(target); err != nil {
		p.t.Fatalf("who-has %v: %v", target, err)
	}
}

func isReplyFor(s seen, target netip.Addr) bool {
	return s.p.Operation == arp.OperationReply && s.p.SenderIP == target && s.p.SenderIP != s.p.TargetIP
}

// resolve asks who-has target every half second until a reply comes, and
// returns it; it fails the test after several seconds.
func (p *peer) resolve(target netip.Addr) seen {
	p.t.Helper()
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
		p.ask(target)
		got := p.read(500*time.Millisecond, func(all []seen) bool {
			return len(all) > 0 && isReplyFor(all[len(all)-1], target)
		})
		if len(got) > 0 && isReplyFor(got[len(got)-1], target) {
			return got[len(got)-1]
		}
	}
	p.t.Fatalf("no ARP reply for %v", target)
	return seen{}
}

// expectNoReply asks who-has target and then who-has sentinel, a VIP that
// is answered: once the sentinel's reply is in (and a little longer, for
// packets reordered across CPUs), any reply for target would have been too.
func (p *peer) expectNoReply(target, sentinel netip.Addr) {
	p.t.Helper()
	p.ask(target)
	p.ask(sentinel)
	got := p.read(8*time.Second, func(all []seen) bool {
		return slices.ContainsFunc(all, func(s seen) bool { return isReplyFor(s, sentinel) })
	})
	if !slices.ContainsFunc(got, func(s seen) bool { return isReplyFor(s, sentinel) }) {
		p.t.Fatalf("no reply for the sentinel %v", sentinel)
	}
	got = append(got, p.read(300*time.Millisecond, func([]seen) bool { return false })...)
	for _, s := range got {
		if isReplyFor(s, target) {
			p.t.Fatalf("got a reply for %v, which is not answered: %+v", target, *s.p)
		}
	}
}

// expectSilence asks who-has target a few times and expects no reply
// within a second of the last. Used where there is no sentinel to ask.
func (p *peer) expectSilence(target netip.Addr) {
	p.t.Helper()
	for range 3 {
		p.ask(target)
		for _, s := range p.read(time.Second/3, func([]seen) bool { return false }) {
			if isReplyFor(s, target) {
				p.t.Fatalf("got a reply for %v, which is not answered: %+v", target, *s.p)
			}
		}
	}
}

// gratuitous returns the gratuitous ARP packets from mac among all, per VIP.
func gratuitous(all []seen, mac net.HardwareAddr) map[netip.Addr][]seen {
	out := map[netip.Addr][]seen{}
	for _, s := range all {
		if s.p.SenderIP == s.p.TargetIP && s.p.SenderHardwareAddr.String() == mac.String() {
			out[s.p.SenderIP] = append(out[s.p.SenderIP], s)
		}
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// start runs a in the background until the test ends, and checks then that
// Run returned nil. Register it after the topologies it uses, so that it
// stops first.
func start(t *testing.T, a *announce.Announcer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of cancel")
		}
	})
}

func statusOf(a *announce.Announcer, ifname string) (announce.InterfaceStatus, bool) {
	for _, s := range a.Status() {
		if s.Interface == ifname {
			return s, true
		}
	}
	return announce.InterfaceStatus{}, false
}

// eventually polls cond every 20ms for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

func waitState(t *testing.T, a *announce.Announcer, ifname string, want announce.State) announce.InterfaceStatus {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, ok := statusOf(a, ifname)
		if ok && st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s is %v; status: %+v", ifname, want, a.Status())
		}
	}
}

// waitErr waits until ifname has failed with an error that contains text.
func waitErr(t *testing.T, a *announce.Announcer, ifname, text string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, _ := statusOf(a, ifname)
		if st.State == announce.Failed && st.Err != nil && strings.Contains(st.Err.Error(), text) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s fails with %q; status: %+v", ifname, text, a.Status())
		}
	}
}

// packetSockets counts the ARP packet sockets bound to each interface index
// in this process's namespace (/proc/net/packet of this thread, which is
// never one that switched namespaces).
func packetSockets(t *testing.T) map[int]int {
	t.Helper()
	return packetSocketsOf(t, "0806")
}

// packetSocketsOf counts the packet sockets bound to EtherType proto (hex,
// as /proc/net/packet shows it) on each interface index.
func packetSocketsOf(t *testing.T, proto string) map[int]int {
	t.Helper()
	f, err := os.Open("/proc/thread-self/net/packet")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int]int{}
	sc := bufio.NewScanner(f)
	sc.Scan() // header: sk RefCnt Type Proto Iface R Rmem User Inode
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || fields[3] != proto {
			continue
		}
		idx, err := strconv.Atoi(fields[4])
		if err != nil {
			t.Fatalf("parsing %q: %v", sc.Text(), err)
		}
		out[idx]++
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func ifindex(t *testing.T, name string) int {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.Index
}
