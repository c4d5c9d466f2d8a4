//go:build e2e

package e2e

// Package connsync on the real kernel: TestConnSync sends a director's
// connection table to its peer's backup sync daemon (the director runs no
// sync daemon of its own), checks the peer's table entry by entry, what
// the peer does with a connection of a service it lacks, and that the
// connections go on through the peer after the VIPs move;
// TestConnSyncBulk measures reading and sending 10,000 connections.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/connsync"
	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
	"github.com/lbdproject/lbd/lvs"
)

// csService is one virtual service of these tests, NAT to the same port
// of every real server.
type csService struct {
	addr    netip.AddrPort
	udp     bool
	persist int // persistence timeout in seconds, 0 for none
}

func (s csService) key() lvs.Key {
	k := lvs.Key{Addr: s.addr.Addr(), Port: s.addr.Port(), Protocol: lvs.TCP}
	if s.udp {
		k.Protocol = lvs.UDP
	}
	return k
}

func (s csService) add(t *testing.T, tp *topo.Topology, d *topo.Director) {
	t.Helper()
	d.AddVIP(t, s.addr.Addr())
	kind := "-t"
	if s.udp {
		kind = "-u"
	}
	args := []string{"ipvsadm", "-A", kind, s.addr.String(), "-s", "rr"}
	if s.persist > 0 {
		args = append(args, "-p", strconv.Itoa(s.persist))
	}
	d.MustExec(t, args...)
	for _, rs := range tp.RealServers {
		a := rs.Addr(tp.Backend)
		if s.addr.Addr().Is6() {
			a = rs.Addr6(tp.Backend)
		}
		d.MustExec(t, "ipvsadm", "-a", kind, s.addr.String(), "-r", netip.AddrPortFrom(a, s.addr.Port()).String(), "-m")
	}
}

// csServices is what lbd would hand the sender: every service of the
// sending director, by its key.
func csServices(ss ...csService) connsync.Services {
	m := map[lvs.Key]connsync.Service{}
	for _, s := range ss {
		m[s.key()] = connsync.Service{Forward: lvs.NAT, Persistence: time.Duration(s.persist) * time.Second}
	}
	return connsync.ByVirtual(m)
}

func netnsPath(d *topo.Director) string { return filepath.Join("/run/netns", d.Name) }

// dialSync opens a sender in dir's namespace to the backup daemons of
// syncID on the backend segment.
func dialSync(t *testing.T, dir *topo.Director, syncID uint8, o connsync.Options) *connsync.Sender {
	t.Helper()
	s, err := connsync.Dial(netnsPath(dir), syncd.Daemon{Interface: "backend", SyncID: syncID}, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startBackup starts a backup sync daemon of syncID on dir's backend link.
func startBackup(t *testing.T, dir *topo.Director, syncID uint8) {
	t.Helper()
	_, a := openSyncd(t, dir)
	applySyncd(t, a, []syncd.Daemon{{Role: syncd.Backup, Interface: "backend", SyncID: syncID}}, syncd.Stats{Started: []syncd.Role{syncd.Backup}})
}

// lncEntries returns dir's `ipvsadm -Lnc` entries for the virtual
// services vs, without their expiry: "PRO STATE SOURCE VIRTUAL DEST".
func lncEntries(t *testing.T, dir *topo.Director, vs ...csService) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(dir.MustExec(t, "ipvsadm", "-Lnc"), "\n") {
		f := strings.Fields(line)
		if len(f) != 6 {
			continue
		}
		for _, s := range vs {
			if f[4] == s.addr.String() {
				out = append(out, strings.Join([]string{f[0], f[2], f[3], f[4], f[5]}, " "))
			}
		}
	}
	return out
}

// syncTable reads dir's /proc/net/ip_vs_conn_sync with connsync's reader.
func syncTable(t *testing.T, dir *topo.Director) []connsync.Conn {
	t.Helper()
	var out []connsync.Conn
	for c, err := range connsync.NewReader(strings.NewReader(dir.MustExec(t, "cat", "/proc/net/ip_vs_conn_sync"))).All() {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

func TestConnSync(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Directors: 2, RealServers: 2})
	tp.StartBackends(t)
	dir1, dir2 := tp.Directors[0], tp.Directors[1]
	web := csService{addr: netip.AddrPortFrom(topo.VIP(1), 80)}
	sticky := csService{addr: netip.AddrPortFrom(topo.VIP(2), 80), persist: 300}
	web6 := csService{addr: netip.AddrPortFrom(topo.VIP6(1), 80)}
	solo := csService{addr: netip.AddrPortFrom(topo.VIP(3), 80)} // dir1's only
	// The control: a service on both, which the sender is not told of.
	untold := csService{addr: netip.AddrPortFrom(topo.VIP(4), 80)}
	all := []csService{web, sticky, web6, solo}
	every := append(slices.Clone(all), untold)
	for _, s := range every {
		s.add(t, tp, dir1)
		if s != solo {
			s.add(t, tp, dir2)
		}
	}
	client := tp.ClientHosts[0]
	for _, s := range every {
		waitServes(t, client, topo.HTTP, s.addr)
	}
	// dir1 runs no sync daemon: what reaches dir2 is what the test sends.
	k1, _ := openSyncd(t, dir1)
	checkListed(t, k1)
	startBackup(t, dir2, 42)

	held := map[csService]*topo.Held{}
	for _, s := range every {
		held[s] = client.Hold(t, s.addr)
	}
	want := heldEntries(t, dir1, all)
	if got := lncEntries(t, dir2, every...); len(got) != 0 {
		t.Fatalf("dir2 knows connections before anything was sent: %v", got)
	}

	sender := dialSync(t, dir1, 42, connsync.Options{})
	start := time.Now()
	st, err := sender.SendTable(context.Background(), csServices(all...))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sent in %v: %+v (message bound %d bytes)", time.Since(start).Round(time.Millisecond), st, sender.MaxLen())
	if st.Sent+st.NoService != st.Read || st.NoService < 1 || st.Templates < 1 {
		t.Errorf("stats %+v: want every entry sent but %s's, a template among them", st, untold.addr)
	}
	waitLnc(t, dir2, want, all)
	if got := lncEntries(t, dir2, untold); len(got) != 0 {
		t.Errorf("dir2 has entries of %s, which the sender was not told of: %v", untold.addr, got)
	}
	checkSynced(t, dir1, dir2)
	checkUnbound(t, tp, dir2, sender, solo, all)
	failOver(t, tp, dir2)
	for _, s := range all {
		if ans := held[s].Ask(t); ans.Err != "" || ans.Server != held[s].Server {
			t.Errorf("the connection to %s through dir2: %+v, want an answer from %s", s.addr, ans, held[s].Server)
		}
	}
	if ans := held[untold].Ask(t); ans.Err == "" {
		t.Errorf("the connection to %s, never sent, answered through dir2 (%+v): the failover proves nothing", untold.addr, ans)
	} else {
		t.Logf("the connection to %s, never sent, through dir2: %s", untold.addr, ans.Err)
	}
	// New connections of the held client follow dir2's copy of the
	// template: rr would spread them over both real servers.
	if per := probeOK(t, client, topo.HTTP, sticky.addr, 4).ByServer(); per[held[sticky].Server] != 4 {
		t.Errorf("new connections to the persistent service through dir2: %v, want all 4 on %s", per, held[sticky].Server)
	}
	t.Logf("dir2 after the failover:\n%s", dir2.MustExec(t, "ipvsadm", "-Lnc"))
}

// heldEntries waits until dir holds exactly one established connection
// per service (the held ones; the probes before them have closed) and
// returns those and the persistence templates.
func heldEntries(t *testing.T, dir *topo.Director, all []csService) []string {
	t.Helper()
	var want []string
	poll.Until(t, "one established connection per service on "+dir.Host, settleLimit, func() error {
		want = want[:0]
		for _, s := range all {
			est, tpl := 0, 0
			for _, e := range lncEntries(t, dir, s) {
				switch f := strings.Fields(e); {
				case f[1] == "ESTABLISHED":
					est++
				case strings.HasSuffix(f[2], ":0"):
					tpl++
				default:
					continue
				}
				want = append(want, e)
			}
			if est != 1 || tpl != min(s.persist, 1) {
				return fmt.Errorf("%s: %d established, %d templates:\n%s", s.addr, est, tpl, dir.MustExec(t, "ipvsadm", "-Lnc"))
			}
		}
		return nil
	})
	t.Logf("dir1's entries to send:\n%s", strings.Join(want, "\n"))
	return want
}

// waitLnc waits until dir's `ipvsadm -Lnc` shows every entry of want.
func waitLnc(t *testing.T, dir *topo.Director, want []string, all []csService) {
	t.Helper()
	poll.Until(t, "the sent entries on "+dir.Host, settleLimit, func() error {
		got := map[string]bool{}
		for _, e := range lncEntries(t, dir, all...) {
			got[e] = true
		}
		for _, w := range want {
			if !got[w] {
				return fmt.Errorf("no %q on %s:\n%s", w, dir.Host, dir.MustExec(t, "ipvsadm", "-Lnc"))
			}
		}
		return nil
	})
}

// checkSynced: every entry dir2 holds came by sync (Origin SYNC), and its
// template expires with the persistence timeout sent, not the 3 minutes
// of a template sent without one.
func checkSynced(t *testing.T, dir1, dir2 *topo.Director) {
	t.Helper()
	for _, c := range syncTable(t, dir2) {
		if c.Origin != connsync.OriginSync {
			t.Errorf("dir2 holds %v of origin %s, want SYNC", c, c.Origin)
		}
		if c.Template {
			t.Logf("dir2's template %v expires in %v", c, c.Expires)
			if c.Expires <= 3*time.Minute {
				t.Errorf("dir2's template expires in %v; the service's persistence is 300 s", c.Expires)
			}
		}
	}
	for _, c := range syncTable(t, dir1) {
		if c.Origin != connsync.OriginLocal {
			t.Errorf("dir1 holds %v of origin %s: it runs no backup daemon", c, c.Origin)
		}
	}
}

// checkUnbound: dir2's kernel makes the connection of a service it lacks
// all the same, bound to no destination (ip_vs_proc_conn; it counts in no
// real server's connections). Once dir2 has the service, sending again
// binds it (ip_vs_try_bind_dest): the real server counts it as active.
func checkUnbound(t *testing.T, tp *topo.Topology, dir2 *topo.Director, sender *connsync.Sender, solo csService, all []csService) {
	t.Helper()
	if got := lncEntries(t, dir2, solo); len(got) == 0 {
		t.Errorf("dir2 has no entry of %s, a service it lacks", solo.addr)
	} else {
		t.Logf("dir2's entries of %s, a service it lacks: %v", solo.addr, got)
	}
	if out := dir2.MustExec(t, "ipvsadm", "-Ln"); strings.Contains(out, solo.addr.String()) {
		t.Fatalf("dir2 has the service %s:\n%s", solo.addr, out)
	}
	solo.add(t, tp, dir2)
	if n := activeConns(t, dir2, solo); n != 0 {
		t.Errorf("dir2 counts %d active connections of %s before the entries are sent again", n, solo.addr)
	}
	st, err := sender.SendTable(context.Background(), csServices(all...))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "the connection of "+solo.addr.String()+" to bind on dir2", settleLimit, func() error {
		if n := activeConns(t, dir2, solo); n != 1 {
			return fmt.Errorf("%d active connections:\n%s", n, dir2.MustExec(t, "ipvsadm", "-Ln"))
		}
		return nil
	})
	t.Logf("sent again (%+v): the connection of %s is bound on dir2", st, solo.addr)
}

// activeConns sums the ActiveConn column of s's real servers on dir.
func activeConns(t *testing.T, dir *topo.Director, s csService) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(dir.MustExec(t, "ipvsadm", "-Ln", "-t", s.addr.String()), "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "->" && f[1] != "RemoteAddress:Port" {
			v, err := strconv.Atoi(f[4])
			if err != nil {
				t.Fatalf("ActiveConn in %q: %v", line, err)
			}
			n += v
		}
	}
	return n
}

// failOver moves the VIPs' routes and the real servers' default routes
// (IPv4 and IPv6) to dir.
func failOver(t *testing.T, tp *topo.Topology, dir *topo.Director) {
	t.Helper()
	tp.RouteVIPsVia(t, dir)
	for _, rs := range tp.RealServers {
		rs.MustExec(t, "ip", "route", "replace", "default", "via", dir.Addr(tp.Backend).String())
		rs.MustExec(t, "ip", "-6", "route", "replace", "default", "via", dir.Addr6(tp.Backend).String())
	}
}

// TestConnSyncBulk: 10,000 UDP connections (a datagram from each of as
// many client ports; they stay for IPVS's UDP timeout, 5 minutes) are
// read and sent at the default rate to dir2, and as fast as the socket
// takes them to dir3 (another sync id: dir2 must ignore those). Figures
// only; every entry must reach dir2 at the default rate.
func TestConnSyncBulk(t *testing.T) {
	topo.RequireIPVS(t)
	const n = 10000
	tp := topo.New(t, topo.Options{Directors: 3, RealServers: 1})
	tp.StartBackends(t)
	dir1, dir2, dir3 := tp.Directors[0], tp.Directors[1], tp.Directors[2]
	bulk := csService{addr: netip.AddrPortFrom(topo.VIP(1), topo.BackendUDPPort), udp: true}
	for _, d := range tp.Directors {
		bulk.add(t, tp, d)
	}
	client := tp.ClientHosts[0]
	waitServes(t, client, topo.UDP, bulk.addr)
	startBackup(t, dir2, 42)
	startBackup(t, dir3, 43)
	openUDP(t, client, bulk, n)
	poll.Until(t, fmt.Sprintf("%d connections on dir1", n), 2*time.Minute, func() error {
		if got := countTable(t, dir1, bulk); got < n {
			return fmt.Errorf("%d", got)
		}
		return nil
	})

	start := time.Now()
	read := countTable(t, dir1, bulk)
	t.Logf("reading dir1's table (%d entries of the service) with connsync.Reader: %v", read, time.Since(start).Round(time.Millisecond))
	paced := dialSync(t, dir1, 42, connsync.Options{})
	start = time.Now()
	st, err := paced.SendTable(context.Background(), csServices(bulk))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	// The kernel's table is shared by every namespace: dir2 inserting
	// what it receives moves dir1's entries in the hash chains the
	// reader walks, so it reads some twice (each a harmless update).
	t.Logf("read and sent at the default rate (%d messages/s): %d entries read (%d twice), %d sent, %d messages, %d bytes, in %v (%.0f entries/s)",
		connsync.DefaultRate, st.Read, st.Read-read, st.Sent, st.Messages, st.Bytes, took.Round(time.Millisecond), float64(st.Sent)/took.Seconds())
	if st.Sent < read {
		t.Errorf("sent %d entries of the %d in the table", st.Sent, read)
	}
	arrived := waitArrived(t, dir2, bulk, read)
	if arrived != read {
		t.Errorf("%d of %d entries reached dir2 at the default rate", arrived, read)
	}

	fast := dialSync(t, dir1, 43, connsync.Options{Rate: -1})
	start = time.Now()
	st3, err := fast.SendTable(context.Background(), csServices(bulk))
	if err != nil {
		t.Fatal(err)
	}
	took = time.Since(start)
	arrived3 := waitArrived(t, dir3, bulk, read)
	t.Logf("read and sent unpaced: %d entries (%d read twice) in %d messages in %v; %d of %d reached dir3 (a backup's socket buffer is net.core.rmem_default unless vs.sync_sock_size is set)",
		st3.Sent, st3.Read-read, st3.Messages, took.Round(time.Millisecond), arrived3, read)
	if got := countSynced(t, dir2, bulk); got != arrived {
		t.Errorf("dir2 holds %d synced entries after messages of another sync id, had %d", got, arrived)
	}
}

// openUDP sends a datagram to s from each of n source ports of client.
func openUDP(t *testing.T, client *topo.Node, s csService, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := client.Command(ctx, "hping3", "-q", "-2", "-p", strconv.Itoa(int(s.addr.Port())), "-s", "10000",
		"-c", strconv.Itoa(n), "-i", "u200", s.addr.Addr().String()).CombinedOutput()
	// hping3 exits 1 when fewer answers than probes came back; only a
	// failure to run counts.
	var ee interface{ ExitCode() int }
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		t.Fatalf("hping3: %v\n%s", err, out)
	}
	t.Logf("hping3 sent %d datagrams from as many ports in %v", n, time.Since(start).Round(time.Millisecond))
}

// countTable counts s's entries in dir's table, read by connsync.
func countTable(t *testing.T, dir *topo.Director, s csService) int {
	t.Helper()
	f, err := connsync.OpenTable(netnsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for c, err := range connsync.NewReader(f).All() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Virtual == s.addr {
			n++
		}
	}
	return n
}

// countSynced counts s's entries of origin SYNC on dir.
func countSynced(t *testing.T, dir *topo.Director, s csService) int {
	t.Helper()
	n := 0
	for _, c := range syncTable(t, dir) {
		if c.Virtual == s.addr && c.Origin == connsync.OriginSync {
			n++
		}
	}
	return n
}

// waitArrived waits until dir holds want synced entries of s, or their
// count stops growing for 5 s, and returns the count.
func waitArrived(t *testing.T, dir *topo.Director, s csService, want int) int {
	t.Helper()
	start, last, lastChange := time.Now(), -1, time.Now()
	for {
		got := countSynced(t, dir, s)
		if got != last {
			last, lastChange = got, time.Now()
		}
		if got >= want || time.Since(lastChange) > 5*time.Second {
			t.Logf("%d of %d entries on %s, counted %v after the send", got, want, dir.Host, time.Since(start).Round(time.Millisecond))
			return got
		}
		time.Sleep(poll.Interval)
	}
}
