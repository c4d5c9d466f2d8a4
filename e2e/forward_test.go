//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// fwdEnv is a topology for direct routing and tunnels: the router is on
// the backend link too, and the real servers' default route goes through
// it, so their replies reach the clients without the director.
type fwdEnv struct {
	root     *testing.T // the test, not a subtest: what outlives subtests is started with it
	tp       *topo.Topology
	dir      *topo.Director
	client   *topo.Node
	backends []*topo.Process
	bin      string
}

func newForwardEnv(t *testing.T) *fwdEnv {
	t.Helper()
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	e := &fwdEnv{root: t, tp: tp, dir: tp.Directors[0], client: tp.ClientHosts[0], bin: topo.RequireLBD(t)}
	tp.Backend.Attach(t, tp.Router, 254)
	// The replies come from the VIP on the router's backend link while
	// its route to the VIP leads to the director: strict reverse-path
	// filtering would drop them, loose mode (2) passes them
	// (docs/realserver.md, DR's limits).
	tp.Router.MustExec(t, "sysctl", "-w", "net.ipv4.conf.all.rp_filter=2", "net.ipv4.conf."+tp.Backend.Name+".rp_filter=2")
	for _, rs := range tp.RealServers {
		rs.MustExec(t, "ip", "route", "replace", "default", "via", tp.Router.Addr(tp.Backend).String())
		rs.MustExec(t, "ip", "-6", "route", "replace", "default", "via", tp.Router.Addr6(tp.Backend).String())
		e.backends = append(e.backends, rs.StartBackend(t, topo.BackendConfig{HTTPPort: topo.BackendHTTPPort}))
	}
	return e
}

// realServerSetup runs `lbd realserver setup` on every real server, and
// checks it with `lbd realserver check`.
func (e *fwdEnv) realServerSetup(t *testing.T, args ...string) {
	t.Helper()
	for _, rs := range e.tp.RealServers {
		record := filepath.Join(t.TempDir(), "realserver.json") // one per real server
		rs.MustExec(t, append([]string{e.bin, "realserver", "setup", "--record", record}, args...)...)
		if out, err := rs.Exec(append([]string{e.bin, "realserver", "check"}, args...)...); err != nil {
			t.Fatalf("lbd realserver check on %s after setup: %v\n%s", rs.Host, err, out)
		}
	}
}

// drConfig is TestForwardDR's configuration: an IPv4 and an IPv6 service
// forwarded by direct routing, the IPv4 one health-checked.
func (e *fwdEnv) drConfig() string {
	rs := func(i int, six bool) string {
		if six {
			return e.tp.RealServers[i].Addr6(e.tp.Backend).String()
		}
		return e.tp.RealServers[i].Addr(e.tp.Backend).String()
	}
	return fmt.Sprintf(`
[sync]
sync_period = "3s"

[[service]]
name = "web"
vips = ["%s"]
port = 80
scheduler = "rr"
forward = "dr"
health_check = { type = "tcp", interval = "300ms" }
real_server = [{ address = "%s" }, { address = "%s" }]

[[service]]
name = "web6"
vips = ["%s"]
port = 80
scheduler = "rr"
forward = "dr"
health_check = { type = "none" }
real_server = [{ address = "%s" }, { address = "%s" }]

[[service]]
name = "fenced"
vips = ["%s"]
port = 80
forward = "dr"
source_ranges = ["198.18.250.0/24"]
health_check = { type = "none" }
real_server = [{ address = "%s" }]

[[service]]
name = "offlink"
vips = ["%s"]
port = 80
forward = "dr"
health_check = { type = "none" }
real_server = [{ address = "%s" }]
`, topo.VIP(1), rs(0, false), rs(1, false), topo.VIP6(1), rs(0, true), rs(1, true), topo.VIP(3), rs(0, false), topo.VIP(2), offLinkRS)
}

// offLinkRS is a direct-routing real server on no link of the director.
const offLinkRS = "198.18.9.9"

// TestForwardDR proves direct routing on the real kernel, IPv4 and IPv6:
// the real servers (set up by `lbd realserver setup`) answer the client
// themselves, so replies bypass the director; its VIP:port is not tracked
// by conntrack; a dead real server is drained by its health check; drift
// of the forwarding method is repaired; a restart writes nothing.
func TestForwardDR(t *testing.T) {
	e := newForwardEnv(t)
	web, web6 := netip.AddrPortFrom(topo.VIP(1), 80), netip.AddrPortFrom(topo.VIP6(1), 80)
	e.realServerSetup(t, "--method", "dr", "--vip", web.Addr().String(), "--vip", web6.Addr().String())
	l := startLBD(t, e.dir, e.drConfig())
	waitIPVS(t, e.dir, "IPVS to hold the DR services", l.plan(t))
	if out := e.dir.MustExec(t, "ipvsadm", "-Sn"); strings.Count(out, " -g ") != 6 {
		t.Errorf("want 6 destinations with -g (direct routing):\n%s", out)
	}
	waitServes(t, e.client, topo.HTTP, web)
	waitServes(t, e.client, topo.HTTP, web6)
	for _, c := range []struct {
		target netip.AddrPort
		client netip.Addr
	}{{web, e.client.Addr(e.tp.Clients)}, {web6, e.client.Addr6(e.tp.Clients)}} {
		answers := probeOK(t, e.client, topo.HTTP, c.target, 10)
		if per := answers.ByServer(); per["rs1"] != 5 || per["rs2"] != 5 {
			t.Errorf("rr through %s: %v; want 5 and 5", c.target, per)
		}
		if a := answers[0].Client; a != c.client {
			t.Errorf("the real server saw client %s through %s; want %s (direct routing keeps the client's address)", a, c.target, c.client)
		}
	}

	t.Run("an off-link real server is reported, not refused", func(t *testing.T) {
		want := "forwards by direct routing, but no connected route of this director covers " + offLinkRS
		eventually(t, "lbd status to report the off-link real server", func() error {
			if out := e.dir.MustExec(t, l.bin, "status", "--socket", l.socket()); !strings.Contains(out, want) {
				return fmt.Errorf("lbd status does not say %q:\n%s", want, out)
			}
			return nil
		})
		waitRules(t, e.dir, "the off-link real server kept", fmt.Sprintf("-a -t %s:80 -r %s:80 -g -w 1", topo.VIP(2), offLinkRS))
	})
	t.Run("unserved ports rejected, source ranges kept", func(t *testing.T) {
		// The director's own filter still guards DR VIPs: a port of the
		// VIP no service serves is refused at once (untracked are only
		// the served ones), and a client outside source_ranges dropped.
		for _, c := range []struct {
			target  netip.AddrPort
			refused bool // else dropped: no answer at all
		}{{netip.AddrPortFrom(topo.VIP(1), 81), true}, {netip.AddrPortFrom(topo.VIP(3), 80), false}} {
			answers, err := e.client.Probe(topo.HTTP, c.target, 1, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if errs := answers.Errors(); len(errs) != 1 || strings.Contains(errs[0], "refused") != c.refused {
				t.Errorf("%s: %+v; want the request refused (%v) or else dropped", c.target, answers, c.refused)
			}
		}
	})
	t.Run("replies bypass the director, untracked", func(t *testing.T) { e.bypass(t, web) })
	t.Run("a dead real server is drained", func(t *testing.T) { e.drain(t, web) })
	t.Run("drift of the method is repaired", func(t *testing.T) {
		rs1 := netip.AddrPortFrom(e.tp.RealServers[0].Addr(e.tp.Backend), 80)
		e.dir.MustExec(t, "ipvsadm", "-e", "-t", web.String(), "-r", rs1.String(), "-m", "-w", "1")
		waitIPVS(t, e.dir, "the periodic sync to restore -g", l.plan(t))
		probeOK(t, e.client, topo.HTTP, web, 4)
	})
	t.Run("a restart writes nothing", func(t *testing.T) {
		restartWritesNothing(t, l, "")
		waitIPVS(t, e.dir, "the DR services kept", l.plan(t))
	})
}

// bypass sends requests through target and reads the director's
// counters: the replies never cross it (IPVS's outgoing packets stay 0,
// its frontend sends next to nothing), and conntrack holds no entry for
// the VIP's port (NOTRACK in lbd's raw table).
func (e *fwdEnv) bypass(t *testing.T, target netip.AddrPort) {
	const requests = 50
	front, back := e.tp.Frontend.Name, e.tp.Backend.Name
	// Entries of the first requests, sent while the VIP was bound but
	// lbd's raw table not yet written (they are applied side by side),
	// stay until they time out: start from none.
	e.dir.MustExec(t, "sh", "-c", "conntrack -D -p tcp -d "+target.Addr().String()+" --dport 80 2>/dev/null || true")
	txBefore, rxBefore := linkStats(t, e.dir.Node, front), linkStats(t, e.dir.Node, back)
	probeOK(t, e.client, topo.HTTP, target, requests)
	txAfter, rxAfter := linkStats(t, e.dir.Node, front), linkStats(t, e.dir.Node, back)
	// The kernel's estimator folds its per-CPU counters into what ipvsadm
	// reads every 2 seconds.
	var in, out uint64
	eventually(t, "IPVS to count the requests' packets", func() error {
		if in, out = ipvsPackets(t, e.dir, target); in < requests {
			return fmt.Errorf("IPVS counted %d packets in so far", in)
		}
		return nil
	})
	sent := txAfter.TX.Packets - txBefore.TX.Packets
	t.Logf("FIGURE direct routing, %d requests: IPVS in %d packets, out %d; the director's frontend sent %d packets (%d bytes), its backend received %d",
		requests, in, out, sent, txAfter.TX.Bytes-txBefore.TX.Bytes, rxAfter.RX.Packets-rxBefore.RX.Packets)
	if out != 0 || in == 0 {
		t.Errorf("IPVS counted %d packets in and %d out for %s; want replies never through the director (out 0)", in, out, target)
	}
	if sent >= requests {
		t.Errorf("the director's frontend sent %d packets for %d requests; want the replies to bypass it", sent, requests)
	}
	entries := e.dir.MustExec(t, "sh", "-c", "conntrack -L -p tcp -d "+target.Addr().String()+" --dport 80 2>/dev/null | wc -l")
	total := e.dir.MustExec(t, "sh", "-c", "conntrack -C")
	t.Logf("FIGURE direct routing: conntrack entries for %s after %d requests: %s (all entries: %s)", target, requests,
		strings.TrimSpace(entries), strings.TrimSpace(total))
	if strings.TrimSpace(entries) != "0" {
		t.Errorf("conntrack holds %s entries for %s; want none (NOTRACK):\n%s", strings.TrimSpace(entries), target,
			e.dir.MustExec(t, "sh", "-c", "conntrack -L -p tcp -d "+target.Addr().String()+" --dport 80 2>&1"))
	}
	if raw := e.dir.MustExec(t, "iptables", "-t", "raw", "-L", "LBD-PREROUTING", "-v", "-n", "-x"); !regexp.MustCompile(`(?m)^\s*[1-9]\d*\s+\d+\s+CT\b`).MatchString(raw) {
		t.Errorf("lbd's NOTRACK rule matched nothing:\n%s", raw)
	}
}

// drain stops the first real server's backend: its health check fails,
// lbd drains it (weight 0), and every request goes to the other.
func (e *fwdEnv) drain(t *testing.T, target netip.AddrPort) {
	rs1 := netip.AddrPortFrom(e.tp.RealServers[0].Addr(e.tp.Backend), 80)
	e.backends[0].Stop()
	waitRules(t, e.dir, "rs1 drained", fmt.Sprintf("-a -t %s -r %s -g -w 0", target, rs1))
	if per := probeOK(t, e.client, topo.HTTP, target, 6).ByServer(); per["rs2"] != 6 {
		t.Errorf("with rs1 down: %v; want all 6 on rs2", per)
	}
	e.backends[0] = e.tp.RealServers[0].StartBackend(e.root, topo.BackendConfig{HTTPPort: topo.BackendHTTPPort})
	waitRules(t, e.dir, "rs1 back", fmt.Sprintf("-a -t %s -r %s -g -w 1", target, rs1))
}

// ifStats is what `ip -s -j link` says of an interface's traffic.
type ifStats struct {
	RX struct{ Packets, Bytes uint64 } `json:"rx"`
	TX struct{ Packets, Bytes uint64 } `json:"tx"`
}

func linkStats(t *testing.T, n *topo.Node, ifname string) ifStats {
	t.Helper()
	var out []struct {
		Stats ifStats `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(n.MustExec(t, "ip", "-s", "-j", "link", "show", "dev", ifname)), &out); err != nil || len(out) != 1 {
		t.Fatalf("ip -s -j link show dev %s: %v", ifname, err)
	}
	return out[0].Stats
}

// ipvsPackets reads a virtual server's packet counters (ipvsadm --stats).
func ipvsPackets(t *testing.T, dir *topo.Director, target netip.AddrPort) (in, out uint64) {
	t.Helper()
	text := dir.MustExec(t, "ipvsadm", "-L", "-n", "--stats", "--exact")
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 7 && f[0] == "TCP" && f[1] == target.String() {
			in, _ = strconv.ParseUint(f[3], 10, 64)
			out, _ = strconv.ParseUint(f[4], 10, 64)
			return in, out
		}
	}
	t.Fatalf("no counters for %s in:\n%s", target, text)
	return 0, 0
}

// TestForwardTunnel proves tunnelling on the real kernel with each of its
// encapsulations, the real servers set up by `lbd realserver setup`:
// they decapsulate and answer the client themselves; a 64 KiB upload
// crosses the tunnel in full-size packets (IPVS answers a packet that no
// longer fits with "fragmentation needed", and the client's path MTU
// follows); a restart reads the encapsulation back and writes nothing.
func TestForwardTunnel(t *testing.T) {
	for _, tt := range []struct {
		tunnel string
		keys   string // the service's tunnel keys
		setup  []string
	}{
		{"ipip", `tunnel_type = "ipip"`, nil},
		{"gue", "tunnel_type = \"gue\"\ntunnel_port = 6080", []string{"--gue-port", "6080"}},
		{"gre", `tunnel_type = "gre"`, nil},
	} {
		t.Run(tt.tunnel, func(t *testing.T) {
			e := newForwardEnv(t)
			web := netip.AddrPortFrom(topo.VIP(1), 80)
			e.realServerSetup(t, append([]string{"--method", "tun", "--tunnel", tt.tunnel, "--vip", web.Addr().String()}, tt.setup...)...)
			l := startLBD(t, e.dir, fmt.Sprintf(`
[[service]]
name = "web"
vips = ["%s"]
port = 80
scheduler = "rr"
forward = "tun"
%s
health_check = { type = "tcp", interval = "300ms" }
real_server = [{ address = "%s" }, { address = "%s" }]
`, web.Addr(), tt.keys, e.tp.RealServers[0].Addr(e.tp.Backend), e.tp.RealServers[1].Addr(e.tp.Backend)))
			waitIPVS(t, e.dir, "IPVS to hold the tunnel service as lbd plan says", l.plan(t))
			waitServes(t, e.client, topo.HTTP, web)
			answers := probeOK(t, e.client, topo.HTTP, web, 10)
			if per := answers.ByServer(); per["rs1"] != 5 || per["rs2"] != 5 {
				t.Errorf("rr through the %s tunnel: %v; want 5 and 5", tt.tunnel, per)
			}
			if a := answers[0].Client; a != e.client.Addr(e.tp.Clients) {
				t.Errorf("the real server saw client %s; want %s", a, e.client.Addr(e.tp.Clients))
			}
			front := e.tp.Frontend.Name
			before := linkStats(t, e.dir.Node, front)
			e.upload(t, web, 64<<10, 4)
			sent := linkStats(t, e.dir.Node, front).TX.Packets - before.TX.Packets
			// The kernel's estimator folds its per-CPU counters into what
			// ipvsadm reads every 2 seconds.
			var in, out uint64
			eventually(t, "IPVS to count the tunnel's packets", func() error {
				if in, out = ipvsPackets(t, e.dir, web); in == 0 {
					return fmt.Errorf("IPVS counted no packet yet")
				}
				return nil
			})
			// IPVS counts as outgoing the ICMP errors it relays, so its out
			// counter is a figure here; the frontend's is the proof: the
			// replies (dozens of packets) never cross the director.
			t.Logf("FIGURE %s tunnel: IPVS in %d packets, out %d; the director's frontend sent %d packets during 4 uploads", tt.tunnel, in, out, sent)
			if sent > 8 || in == 0 {
				t.Errorf("the director's frontend sent %d packets during the uploads (IPVS in %d); want the replies to bypass it", sent, in)
			}
			restartWritesNothing(t, l, " (the encapsulation not read back?)")
		})
	}
}

// upload posts size bytes through target n times: each must arrive whole
// at a real server.
func (e *fwdEnv) upload(t *testing.T, target netip.AddrPort, size, n int) {
	t.Helper()
	body := strings.Repeat("x", size)
	for i := range n {
		out, err := e.client.HTTP("POST", "http://"+target.String()+"/upload", body)
		if err != nil {
			t.Fatalf("upload %d of %d bytes through %s: %v", i, size, target, err)
		}
		if want := fmt.Sprintf("bytes=%d", size); !strings.Contains(out, want) {
			t.Fatalf("upload %d: the real server answered %q; want %s", i, strings.TrimSpace(out), want)
		}
	}
	t.Logf("FIGURE %d uploads of %d bytes through %s arrived whole", n, size, target)
}

// restartWritesNothing kills lbd, starts it again and checks that its
// first sync finds the kernel as it wants it; hint adds to the failure.
func restartWritesNothing(t *testing.T, l *lbd, hint string) {
	t.Helper()
	l.kill(t)
	mark := len(l.proc.Output())
	eventually(t, "the restarted lbd's first sync", func() error {
		if !strings.Contains(sinceLog(l.proc, mark), "kernel already up to date") {
			return fmt.Errorf("no sync logged yet:\n%s", sinceLog(l.proc, mark))
		}
		return nil
	})
	if out := sinceLog(l.proc, mark); strings.Contains(out, "sync applied") {
		t.Errorf("the restarted lbd wrote to the kernel%s:\n%s", hint, out)
	}
}
