//go:build e2e

package e2e

// Package syncd on the real kernel: TestSyncDaemons starts, checks,
// changes and stops a director's sync daemons through the Applier and
// compares with ipvsadm; TestSyncDaemonsStartStop stops daemons right
// after starting them (a kernel race); TestSyncConnections proves that a connection
// forwarded by a master director appears on the backup director and
// keeps working there after the VIP moves.
//
// The tests drive the kernel from this process: syncd.OpenAt opens its
// netlink socket inside the director's namespace.

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// openSyncd opens the sync daemons of dir's namespace and stops them all
// at the end of the test.
func openSyncd(t *testing.T, dir *topo.Director) (*syncd.NetlinkKernel, *syncd.Applier) {
	t.Helper()
	k, err := syncd.OpenAt(filepath.Join("/run/netns", dir.Name))
	if err != nil {
		t.Fatal(err)
	}
	a := syncd.New(k)
	t.Cleanup(func() {
		if _, err := a.Apply(nil); err != nil {
			t.Errorf("stopping the sync daemons of %s: %v", dir.Host, err)
		}
		k.Close()
	})
	return k, a
}

// applySyncd applies want and checks which roles were started, stopped
// and restarted.
func applySyncd(t *testing.T, a *syncd.Applier, want []syncd.Daemon, wantStats syncd.Stats) {
	t.Helper()
	st, err := a.Apply(want)
	if err != nil {
		t.Fatalf("Apply(%v): %v", want, err)
	}
	if fmt.Sprint(st) != fmt.Sprint(wantStats) {
		t.Fatalf("Apply(%v) = %+v, want %+v", want, st, wantStats)
	}
}

// checkListed checks what the kernel lists against want, exactly.
func checkListed(t *testing.T, k *syncd.NetlinkKernel, want ...syncd.Daemon) {
	t.Helper()
	got, err := k.List()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		t.Fatalf("the kernel lists:\n%+v\nwant:\n%+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("the kernel lists %+v, want %+v", got[i], want[i])
		}
	}
}

// checkIpvsadmDaemons checks `ipvsadm -L --daemon` for lines containing
// each of want, and no more lines.
func checkIpvsadmDaemons(t *testing.T, dir *topo.Director, want ...string) {
	t.Helper()
	out := strings.TrimSpace(dir.MustExec(t, "ipvsadm", "-L", "--daemon"))
	t.Logf("ipvsadm -L --daemon:\n%s", out)
	var lines []string
	if out != "" {
		lines = strings.Split(out, "\n")
	}
	if len(lines) != len(want) {
		t.Fatalf("ipvsadm lists %d daemons, want %d:\n%s", len(lines), len(want), out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("ipvsadm -L --daemon lacks %q:\n%s", w, out)
		}
	}
}

func TestSyncDaemons(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{})
	dir := tp.Directors[0]
	k, a := openSyncd(t, dir)
	if v, err := k.SyncVersion(); err != nil || (v != 0 && v != 1) {
		t.Fatalf("sync_version %d, %v", v, err)
	} else {
		t.Logf("net.ipv4.vs.sync_version = %d", v)
	}

	// Defaults: the kernel resolves them (a backup's maxlen from the
	// link's MTU, 1500 on a veth), and a second Apply sees a match.
	master := syncd.Daemon{Role: syncd.Master, Interface: "backend", SyncID: 7}
	backup := syncd.Daemon{Role: syncd.Backup, Interface: "backend", SyncID: 7}
	applySyncd(t, a, []syncd.Daemon{master, backup}, syncd.Stats{Started: []syncd.Role{syncd.Master, syncd.Backup}})
	resolved := func(d syncd.Daemon) syncd.Daemon {
		d.MaxLen, d.Group, d.Port, d.TTL = 1472, syncd.DefaultGroup(), 8848, 1
		return d
	}
	checkListed(t, k, resolved(master), resolved(backup))
	checkIpvsadmDaemons(t, dir, "master sync daemon (mcast=backend, syncid=7", "backup sync daemon (mcast=backend, syncid=7")
	applySyncd(t, a, []syncd.Daemon{master, backup}, syncd.Stats{})

	// Every setting changed: both restarted, read back as given.
	master2 := syncd.Daemon{Role: syncd.Master, Interface: "frontend", SyncID: 8, MaxLen: 1200,
		Group: netip.MustParseAddr("239.18.0.1"), Port: 9000, TTL: 2}
	backup2 := syncd.Daemon{Role: syncd.Backup, Interface: "backend", SyncID: 0,
		Group: netip.MustParseAddr("ff02::8:81"), Port: 9100, TTL: 3}
	applySyncd(t, a, []syncd.Daemon{master2, backup2}, syncd.Stats{Restarted: []syncd.Role{syncd.Master, syncd.Backup}})
	backup2Listed := backup2
	backup2Listed.MaxLen = 1500 - 48 // IPv6 and UDP headers
	checkListed(t, k, master2, backup2Listed)
	checkIpvsadmDaemons(t, dir, "master sync daemon (mcast=frontend, syncid=8", "backup sync daemon (mcast=backend, syncid=0")
	applySyncd(t, a, []syncd.Daemon{master2, backup2}, syncd.Stats{})

	// One setting of one: only that one restarts.
	backup3 := backup2
	backup3.TTL = 4
	applySyncd(t, a, []syncd.Daemon{master2, backup3}, syncd.Stats{Restarted: []syncd.Role{syncd.Backup}})

	checkKernelErrors(t, k, master2)

	applySyncd(t, a, nil, syncd.Stats{Stopped: []syncd.Role{syncd.Master, syncd.Backup}})
	checkListed(t, k)
	checkIpvsadmDaemons(t, dir)
	if err := k.Stop(syncd.Master); !errors.Is(err, syncd.ErrNotRunning) || !errors.Is(err, syscall.ESRCH) {
		t.Errorf("stopping a master that does not run: %v, want ErrNotRunning (ESRCH)", err)
	}
}

// checkKernelErrors checks the kernel's answers to what the Applier
// avoids, with running (a master) running.
func checkKernelErrors(t *testing.T, k *syncd.NetlinkKernel, running syncd.Daemon) {
	t.Helper()
	again := running
	again.SyncID++
	if err := k.Start(again); !errors.Is(err, syncd.ErrRunning) || !errors.Is(err, syscall.EEXIST) {
		t.Errorf("starting a second master: %v, want ErrRunning (EEXIST)", err)
	}
	if ds := mustList(t, k); len(ds) != 2 || ds[0] != running {
		t.Errorf("after a refused start the kernel lists %+v, want %+v unchanged", ds, running)
	}
	nodev := syncd.Daemon{Role: syncd.Master, Interface: "nosuch0"}
	if err := k.Stop(syncd.Master); err != nil {
		t.Fatal(err)
	}
	if err := k.Start(nodev); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("starting a master on a missing interface: %v, want ENODEV", err)
	} else {
		t.Logf("a missing interface: %v", err)
	}
	if err := k.Start(running); err != nil {
		t.Fatal(err)
	}
}

func mustList(t *testing.T, k *syncd.NetlinkKernel) []syncd.Daemon {
	t.Helper()
	ds, err := k.List()
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestSyncDaemonsStartStop stops daemons right after starting them: a
// kernel thread stopped before it first ran makes the kernel's stop
// return EINTR, which netlink answers with nothing at all (a run of
// TestSyncDaemons met it: a 30 s wait, then a failure). Stop must still
// succeed, and leave nothing running. Busy CPUs widen the window.
func TestSyncDaemonsStartStop(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 1})
	k, _ := openSyncd(t, tp.Directors[0])
	stop := make(chan struct{})
	defer close(stop)
	for range runtime.NumCPU() {
		go spin(stop)
	}
	const rounds = 10
	slow, slowest := map[syncd.Role]int{}, time.Duration(0)
	for i := range rounds {
		for _, r := range []syncd.Role{syncd.Master, syncd.Backup} {
			if err := k.Start(syncd.Daemon{Role: r, Interface: "backend", SyncID: uint8(i)}); err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
		for _, r := range []syncd.Role{syncd.Master, syncd.Backup} {
			start := time.Now()
			if err := k.Stop(r); err != nil {
				t.Fatalf("round %d: stopping the %s: %v", i, r, err)
			}
			// An unanswered stop costs the answer's wait (2 s); others
			// take milliseconds.
			if d := time.Since(start); d > time.Second {
				slow[r]++
				slowest = max(slowest, d)
			}
		}
	}
	checkListed(t, k)
	t.Logf("%d start/stop rounds of both roles, CPUs busy: %d master and %d backup stops went unanswered (EINTR), slowest %v",
		rounds, slow[syncd.Master], slow[syncd.Backup], slowest.Round(time.Millisecond))
}

// spin keeps a CPU busy until stop is closed.
func spin(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
	}
}

// TestSyncConnections: dir1 runs a master daemon, dir2 a backup one, on
// the backend segment; a TCP connection through dir1 appears in dir2's
// connection table, and goes on through dir2 once the VIP's route and
// the real server's default route point there.
func TestSyncConnections(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Directors: 2, RealServers: 1})
	tp.StartBackends(t)
	dir1, dir2 := tp.Directors[0], tp.Directors[1]
	rs := tp.RealServers[0]
	vip := topo.VIP(1)
	web := netip.AddrPortFrom(vip, 80)
	for _, d := range tp.Directors {
		d.AddVIP(t, vip)
		d.MustExec(t, "ipvsadm", "-A", "-t", web.String(), "-s", "rr")
		d.MustExec(t, "ipvsadm", "-a", "-t", web.String(), "-r", netip.AddrPortFrom(rs.Addr(tp.Backend), 80).String(), "-m")
	}
	// The kernel's defaults, left as they are: a connection is synced on
	// its 3rd packet from the client (sync_threshold 3 50), and on state
	// changes; the held connection's SYN, ACK and request make three.
	for _, key := range []string{"sync_version", "sync_threshold", "sync_refresh_period", "sync_ports"} {
		v := dir1.MustExec(t, "cat", "/proc/sys/net/ipv4/vs/"+key)
		t.Logf("net.ipv4.vs.%s = %s", key, strings.Join(strings.Fields(v), " "))
	}
	client := tp.ClientHosts[0]
	poll.Until(t, "the VIP to answer through dir1", time.Minute, func() error {
		as, err := client.Probe(topo.HTTP, web, 1, 10*time.Second)
		if err == nil && len(as.Errors()) > 0 {
			err = errors.New(as.Errors()[0])
		}
		return err
	})
	// The control: a connection that passes no packet while a master
	// runs is never synced, and must break at the failover.
	fromClient := func(c []string) bool {
		return c[2] == "ESTABLISHED" && strings.HasPrefix(c[3], client.Addr(tp.Clients).String()+":")
	}
	unsynced := client.Hold(t, web)
	before := ipvsConns(t, dir1, web, fromClient)
	if len(before) != 1 {
		t.Fatalf("dir1 has %d established connections from the client, want 1:\n%s", len(before), dir1.MustExec(t, "ipvsadm", "-Lnc"))
	}

	_, a1 := openSyncd(t, dir1)
	_, a2 := openSyncd(t, dir2)
	applySyncd(t, a1, []syncd.Daemon{{Role: syncd.Master, Interface: "backend", SyncID: 42}}, syncd.Stats{Started: []syncd.Role{syncd.Master}})
	applySyncd(t, a2, []syncd.Daemon{{Role: syncd.Backup, Interface: "backend", SyncID: 42}}, syncd.Stats{Started: []syncd.Role{syncd.Backup}})

	h := client.Hold(t, web)
	held := time.Now()
	conns := ipvsConns(t, dir1, web, func(c []string) bool { return fromClient(c) && c[3] != before[0][3] })
	if len(conns) != 1 {
		t.Fatalf("dir1 has %d new established connections from the client, want 1:\n%s", len(conns), dir1.MustExec(t, "ipvsadm", "-Lnc"))
	}
	conn := conns[0]
	synced, checks := waitSynced(t, dir2, web, conn)
	t.Logf("connection %s synced to dir2 within %v of its first answer (guest clock; %d checks of ipvsadm -Lnc); dir1: %s; dir2: %s",
		conn[3], time.Since(held).Round(time.Millisecond), checks, strings.Join(conn, " "), strings.Join(synced, " "))
	if got := ipvsConns(t, dir2, web, func(c []string) bool { return c[3] == before[0][3] }); len(got) != 0 {
		t.Errorf("the connection opened before the master started reached dir2: %v", got)
	}

	// Failover: the synced connection goes on through dir2; the other
	// one is reset there.
	tp.RouteVIPsVia(t, dir2)
	rs.MustExec(t, "ip", "route", "replace", "default", "via", dir2.Addr(tp.Backend).String())
	if ans := h.Ask(t); ans.Err != "" || ans.Server != h.Server {
		t.Errorf("the synced connection through dir2: %+v, want an answer from %s", ans, h.Server)
	}
	if ans := unsynced.Ask(t); ans.Err == "" {
		t.Errorf("the connection opened before the master started answered through dir2 (%+v): the failover proves nothing", ans)
	} else {
		t.Logf("the unsynced connection through dir2: %s", ans.Err)
	}
	t.Logf("dir2 after the failover:\n%s", dir2.MustExec(t, "ipvsadm", "-Lnc"))
}

// waitSynced waits until dir's connection table holds conn (the same
// client address and port, and real server) and returns its entry there,
// with how many times it looked.
func waitSynced(t *testing.T, dir *topo.Director, web netip.AddrPort, conn []string) (synced []string, checks int) {
	t.Helper()
	poll.Until(t, "the connection to reach "+dir.Host, 2*time.Minute, func() error {
		checks++
		found := ipvsConns(t, dir, web, func(c []string) bool { return c[3] == conn[3] && c[5] == conn[5] })
		if len(found) == 0 {
			return fmt.Errorf("no entry for %s on %s:\n%s", conn[3], dir.Host, dir.MustExec(t, "ipvsadm", "-Lnc"))
		}
		synced = found[0]
		return nil
	})
	return synced, checks
}

// ipvsConns returns the fields (pro expire state source virtual
// destination) of the TCP entries of dir's `ipvsadm -Lnc` for virtual
// server web that match.
func ipvsConns(t *testing.T, dir *topo.Director, web netip.AddrPort, match func([]string) bool) [][]string {
	t.Helper()
	var out [][]string
	for _, line := range strings.Split(dir.MustExec(t, "ipvsadm", "-Lnc"), "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == "TCP" && f[4] == web.String() && match(f) {
			out = append(out, f)
		}
	}
	return out
}
