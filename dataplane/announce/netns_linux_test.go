package announce_test

// These tests send and capture real ARP packets over veth pairs.
//
// How the namespaces are arranged: as root, TestMain re-executes the test
// binary in a fresh, anonymous network namespace (CLONE_NEWNET on the
// child process), so that every thread of the process, and therefore every
// socket the Announcer opens from whatever goroutine, lives there: the
// Announcer runs exactly as in lbd, with no hook to switch namespaces.
// Each test then creates a named namespace for the "neighbour" with
// `ip netns add` and a veth pair between the two. The test talks from the
// neighbour's side with mdlayher/arp sockets opened on a goroutine whose
// locked OS thread entered the neighbour namespace; that goroutine exits
// still locked, so the thread is discarded and never runs anything else in
// the wrong namespace. Sockets keep their namespace once opened.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/announce"
)

// inNetnsEnv is set in the child that TestMain started in a new network
// namespace ("1"), or to why that failed.
const inNetnsEnv = "LBD_ANNOUNCE_TEST_NETNS"

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 && os.Getenv(inNetnsEnv) == "" {
		if code, ok := reexecInNewNetns(); ok {
			os.Exit(code)
		}
	}
	os.Exit(m.Run())
}

// reexecInNewNetns runs this test binary again, with the same arguments,
// in a new network namespace, and returns its exit code. ok is false when
// the child could not be started; the tests then run here and skip.
func reexecInNewNetns() (code int, ok bool) {
	// Pdeathsig fires when the thread that started the child exits.
	runtime.LockOSThread()
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.Setenv(inNetnsEnv, "cannot start the test binary in a new network namespace: "+err.Error())
		return 0, false
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, true
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), true
	}
	fmt.Fprintln(os.Stderr, "test binary in a new network namespace:", err)
	return 1, true
}

func needNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces, veth pairs and AF_PACKET sockets")
	}
	if v := os.Getenv(inNetnsEnv); v != "1" {
		t.Skip(v)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
}

var (
	lbdNet  = netip.MustParsePrefix("198.51.100.1/24")
	peerNet = netip.MustParsePrefix("198.51.100.2/24")
	vip1    = netip.MustParseAddr("198.51.100.10")
	vip2    = netip.MustParseAddr("198.51.100.11")
	notVIP  = netip.MustParseAddr("198.51.100.99")
)

// recheck is short so that a veth just set up, which has no carrier for a
// moment, is seen up quickly; the default only waits longer.
const recheck = 100 * time.Millisecond

// topoSeq makes interface and namespace names unique within the process;
// the process's namespace is private, the named ones are host-wide, so
// those carry the pid as well.
var topoSeq atomic.Int32

// topo is a veth pair: lbdIf in the test process's namespace, where the
// Announcer runs, and peerIf in the neighbour namespace peerNS.
type topo struct {
	peerNS, lbdIf, peerIf string
}

func planTopo() topo {
	n := topoSeq.Add(1)
	return topo{
		peerNS: fmt.Sprintf("lbdarp-%d-%d", os.Getpid(), n),
		lbdIf:  fmt.Sprintf("lbd%d", n),
		peerIf: fmt.Sprintf("peer%d", n),
	}
}

type topoOpts struct {
	noLbdAddr bool // leave lbd's end without an IPv4 address
	noLbdIPv6 bool // leave lbd's end without any IPv6 address, link-local included
	lbdDown   bool // leave lbd's end down
}

func newTopo(t *testing.T, o topoOpts) topo {
	tp := planTopo()
	tp.create(t, o)
	return tp
}

func (tp topo) create(t *testing.T, o topoOpts) {
	t.Helper()
	run(t, "ip", "netns", "add", tp.peerNS)
	t.Cleanup(func() { runQuiet("ip", "netns", "del", tp.peerNS) })
	run(t, "ip", "link", "add", tp.lbdIf, "type", "veth", "peer", "name", tp.peerIf, "netns", tp.peerNS)
	t.Cleanup(func() { runQuiet("ip", "link", "del", tp.lbdIf) })
	if !o.noLbdAddr {
		run(t, "ip", "addr", "add", lbdNet.String(), "dev", tp.lbdIf)
	}
	if o.noLbdIPv6 {
		run(t, "ip", "link", "set", tp.lbdIf, "addrgenmode", "none")
	}
	run(t, "ip", "-n", tp.peerNS, "addr", "add", peerNet.String(), "dev", tp.peerIf)
	run(t, "ip", "-n", tp.peerNS, "addr", "add", peerNet6.String(), "dev", tp.peerIf, "nodad")
	run(t, "ip", "-n", tp.peerNS, "link", "set", tp.peerIf, "up")
	if !o.lbdDown {
		run(t, "ip", "link", "set", tp.lbdIf, "up")
	}
}

func (tp topo) lbdMAC(t *testing.T) net.HardwareAddr {
	t.Helper()
	ifi, err := net.InterfaceByName(tp.lbdIf)
	if err != nil {
		t.Fatal(err)
	}
	return ifi.HardwareAddr
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func runQuiet(name string, args ...string) { _ = exec.Command(name, args...).Run() }

// inNetns runs fn on a fresh OS thread inside the named namespace. The
// thread is discarded afterwards (the goroutine exits locked).
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

func TestWhoHasForAVIPGetsTheInterfaceMAC(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1, vip2}})
	st := waitState(t, a, tp.lbdIf, announce.Answering)
	mac := tp.lbdMAC(t)
	if st.HardwareAddr.String() != mac.String() || !slices.Equal(st.VIPs, []netip.Addr{vip1, vip2}) || st.Err != nil {
		t.Errorf("status = %+v, want %v answering for %v", st, mac, []netip.Addr{vip1, vip2})
	}

	p := tp.dialPeer(t)
	r := p.resolve(vip1)
	if r.p.SenderHardwareAddr.String() != mac.String() || r.p.TargetIP != peerNet.Addr() ||
		r.p.TargetHardwareAddr.String() != p.mac.String() || r.f.Destination.String() != p.mac.String() {
		t.Errorf("reply = %+v in frame to %v; want %v is-at %v, unicast to the asker %v", *r.p, r.f.Destination, vip1, mac, p.mac)
	}

	// The neighbour's own kernel resolves the VIP the same way.
	err := inNetns(tp.peerNS, func() error {
		c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(vip2, 9)))
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
	eventually(t, "the neighbour's kernel has "+vip2.String()+" at "+mac.String(), func() bool {
		out, _ := exec.Command("ip", "-n", tp.peerNS, "neigh", "show", vip2.String(), "dev", tp.peerIf).Output()
		return strings.Contains(string(out), "lladdr "+mac.String())
	})
}

func TestWhoHasForAnotherAddressGetsNoReply(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	waitState(t, a, tp.lbdIf, announce.Answering)
	p := tp.dialPeer(t)
	p.resolve(vip1)
	p.expectNoReply(notVIP, vip1)
}

func TestGratuitousARPOnlyForNewlyAddedVIPs(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	schedule := []time.Duration{0, 300 * time.Millisecond}
	a := announce.New(announce.Options{Logger: testLogger(t), Gratuitous: schedule, Recheck: recheck})
	start(t, a)
	p := tp.dialPeer(t)
	mac := tp.lbdMAC(t)
	perVIP := 2 * len(schedule) // a request and a reply per round

	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	got := gratuitous(p.read(10*time.Second, func(all []seen) bool {
		return len(gratuitous(all, mac)[vip1]) >= perVIP
	}), mac)
	if len(got[vip1]) != perVIP {
		t.Fatalf("saw %d gratuitous ARP packets for %v, want %d", len(got[vip1]), vip1, perVIP)
	}
	var ops []arp.Operation
	for _, s := range got[vip1] {
		ops = append(ops, s.p.Operation)
		if s.f.Destination.String() != ethernet.Broadcast.String() {
			t.Errorf("gratuitous %v sent to %v, want broadcast", s.p.Operation, s.f.Destination)
		}
		wantTHA := make(net.HardwareAddr, 6) // RFC 5227: zero in a request
		if s.p.Operation == arp.OperationReply {
			wantTHA = mac
		}
		if s.p.TargetHardwareAddr.String() != wantTHA.String() {
			t.Errorf("gratuitous %v has target MAC %v, want %v", s.p.Operation, s.p.TargetHardwareAddr, wantTHA)
		}
	}
	slices.Sort(ops)
	if want := []arp.Operation{arp.OperationRequest, arp.OperationRequest, arp.OperationReply, arp.OperationReply}; !slices.Equal(ops, want) {
		t.Errorf("gratuitous operations = %v, want %v", ops, want)
	}

	// The same set again (in a new map, with a duplicate) is no news; a new
	// VIP is, and only it is announced.
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1, vip1}})
	waitState(t, a, tp.lbdIf, announce.Answering)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip2, vip1}})
	got = gratuitous(p.read(10*time.Second, func(all []seen) bool {
		return len(gratuitous(all, mac)[vip2]) >= perVIP
	}), mac)
	if len(got[vip2]) != perVIP {
		t.Errorf("saw %d gratuitous ARP packets for the new %v, want %d", len(got[vip2]), vip2, perVIP)
	}
	if len(got[vip1]) != 0 {
		t.Errorf("%v was announced again (%d packets) although it was already announced", vip1, len(got[vip1]))
	}
}

func TestRemovedVIPIsNoLongerAnswered(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	start(t, a)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1, vip2}})
	waitState(t, a, tp.lbdIf, announce.Answering)
	p := tp.dialPeer(t)
	p.resolve(vip1)

	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip2}})
	eventually(t, vip1.String()+" is no longer in the status", func() bool {
		st, _ := statusOf(a, tp.lbdIf)
		return slices.Equal(st.VIPs, []netip.Addr{vip2})
	})
	p.expectNoReply(vip1, vip2)

	// Without VIPs the interface's socket is closed.
	a.Set(map[string][]netip.Addr{tp.lbdIf: nil, "other0": nil})
	eventually(t, tp.lbdIf+" is gone from the status", func() bool { return len(a.Status()) == 0 })
	if n := packetSockets(t)[ifindex(t, tp.lbdIf)]; n != 0 {
		t.Errorf("%d ARP sockets still open on %s", n, tp.lbdIf)
	}
	p.expectSilence(vip2)
}

// TestStandbyOpensTheSocketWithoutAnswering: a backup's interface has
// its socket open for the addresses it may take over, answers none of
// them, and announces at once when Set hands them over.
func TestStandbyOpensTheSocketWithoutAnswering(t *testing.T) {
	needNetns(t)
	tp := newTopo(t, topoOpts{})
	a := announce.New(announce.Options{Logger: testLogger(t), Gratuitous: []time.Duration{0}, Recheck: recheck})
	start(t, a)
	a.Standby(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	st := waitState(t, a, tp.lbdIf, announce.Standby)
	if len(st.VIPs) != 0 {
		t.Errorf("standby status answers for %v, want none", st.VIPs)
	}
	if n := packetSockets(t)[ifindex(t, tp.lbdIf)]; n != 1 {
		t.Errorf("%d ARP sockets open on %s in standby, want 1", n, tp.lbdIf)
	}
	p := tp.dialPeer(t)
	p.expectSilence(vip1)

	mac := tp.lbdMAC(t)
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	got := gratuitous(p.read(10*time.Second, func(all []seen) bool { return len(gratuitous(all, mac)[vip1]) >= 2 }), mac)
	if len(got[vip1]) < 2 {
		t.Errorf("saw %d gratuitous ARP packets for %v after the takeover, want 2", len(got[vip1]), vip1)
	}
	waitState(t, a, tp.lbdIf, announce.Answering)
	p.resolve(vip1)

	// Given back, standby again: still open, silent.
	a.Set(nil)
	waitState(t, a, tp.lbdIf, announce.Standby)
	p.expectSilence(vip1)
	a.Standby(nil)
	eventually(t, tp.lbdIf+" is gone from the status", func() bool { return len(a.Status()) == 0 })
}

func TestRunReturnsOnCancelAndClosesItsSockets(t *testing.T) {
	needNetns(t)
	tp1 := newTopo(t, topoOpts{})
	tp2 := newTopo(t, topoOpts{noLbdAddr: true}) // lbd's end needs no IPv4 address
	a := announce.New(announce.Options{Logger: testLogger(t), Recheck: recheck})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	// A missing interface does not hold up the others.
	a.Set(map[string][]netip.Addr{tp1.lbdIf: {vip1}, tp2.lbdIf: {vip2}, "nosuch0": {vip1}})
	waitState(t, a, tp1.lbdIf, announce.Answering)
	waitState(t, a, tp2.lbdIf, announce.Answering)
	waitErr(t, a, "nosuch0", "no such network interface")
	p1, p2 := tp1.dialPeer(t), tp2.dialPeer(t)
	p1.resolve(vip1)
	p2.resolve(vip2)
	idx1, idx2 := ifindex(t, tp1.lbdIf), ifindex(t, tp2.lbdIf)
	if n := packetSockets(t); n[idx1] != 1 || n[idx2] != 1 {
		t.Errorf("ARP sockets per ifindex = %v, want one each on %d and %d", n, idx1, idx2)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancel")
	}
	if n := packetSockets(t); n[idx1] != 0 || n[idx2] != 0 {
		t.Errorf("ARP sockets left after Run returned: %v", n)
	}
	p1.expectSilence(vip1)
}

func TestInterfaceThatAppearsLaterIsAnnouncedWhenItComesUp(t *testing.T) {
	needNetns(t)
	a := announce.New(announce.Options{Logger: testLogger(t), Gratuitous: []time.Duration{0}, Recheck: recheck})
	start(t, a)
	tp := planTopo()
	a.Set(map[string][]netip.Addr{tp.lbdIf: {vip1}})
	waitErr(t, a, tp.lbdIf, "no such network interface")

	tp.create(t, topoOpts{lbdDown: true})
	p := tp.dialPeer(t)
	mac := tp.lbdMAC(t)
	waitState(t, a, tp.lbdIf, announce.Down)

	announced := func(what string) {
		t.Helper()
		got := gratuitous(p.read(10*time.Second, func(all []seen) bool {
			return len(gratuitous(all, mac)[vip1]) >= 2
		}), mac)
		if len(got[vip1]) != 2 {
			t.Fatalf("%s: saw %d gratuitous ARP packets for %v, want 2", what, len(got[vip1]), vip1)
		}
	}
	run(t, "ip", "link", "set", tp.lbdIf, "up")
	announced("interface came up")
	waitState(t, a, tp.lbdIf, announce.Answering)
	p.resolve(vip1)

	// A flap: neighbours may have forgotten the VIP meanwhile.
	run(t, "ip", "link", "set", tp.lbdIf, "down")
	waitState(t, a, tp.lbdIf, announce.Down)
	run(t, "ip", "link", "set", tp.lbdIf, "up")
	announced("interface came back up")
}
