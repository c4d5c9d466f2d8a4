//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/internal/netnsrun"
)

// sctpEnv is TestSCTP's topology: fwdEnv's (the router on the backend
// link, the real servers' default route through it, so direct routing
// works; NAT is masqueraded, so its replies come back to the director),
// with an SCTP backend on every real server.
type sctpEnv struct {
	*fwdEnv
	sctp []*topo.Process // per real server
	l    *lbd
}

// The services: NAT and direct routing, IPv4 and IPv6.
var (
	sctpNAT  = netip.AddrPortFrom(topo.VIP(1), topo.BackendSCTPPort)
	sctpNAT6 = netip.AddrPortFrom(topo.VIP6(1), topo.BackendSCTPPort)
	sctpDR   = netip.AddrPortFrom(topo.VIP(2), topo.BackendSCTPPort)
	sctpDR6  = netip.AddrPortFrom(topo.VIP6(2), topo.BackendSCTPPort)
)

// loadSCTP loads the kernel's sctp module (the guest's /init does not):
// the real servers' listeners, the clients' and the director's health
// checks need SCTP sockets. IPVS has its SCTP support built in.
func loadSCTP(t *testing.T) {
	t.Helper()
	if out, err := exec.Command("modprobe", "sctp").CombinedOutput(); err != nil {
		t.Fatalf("modprobe sctp: %v: %s (does the guest image carry net/sctp/sctp.ko?)", err, out)
	}
}

// config is the NAT services with the default check (an SCTP connect,
// every 2 s) and on_unhealthy = "remove", the DR ones with a quick SCTP
// check and the default drain.
func (e *sctpEnv) config() string {
	rs := func(i int, six bool) netip.Addr {
		if six {
			return e.tp.RealServers[i].Addr6(e.tp.Backend)
		}
		return e.tp.RealServers[i].Addr(e.tp.Backend)
	}
	svc := func(name string, vip netip.AddrPort, six bool, extra string) string {
		return fmt.Sprintf("\n[[service]]\nname = %q\nvips = [\"%s\"]\nport = %d\nprotocol = \"sctp\"\nscheduler = \"rr\"\n%s\nreal_server = [{ address = \"%s\" }, { address = \"%s\" }]\n",
			name, vip.Addr(), vip.Port(), extra, rs(0, six), rs(1, six))
	}
	dr := "forward = \"dr\"\nhealth_check = { type = \"sctp\", interval = \"300ms\" }"
	return "[sync]\nsync_period = \"3s\"\n" +
		svc("sig", sctpNAT, false, `on_unhealthy = "remove"`) + svc("sig6", sctpNAT6, true, `on_unhealthy = "remove"`) +
		svc("sig-dr", sctpDR, false, dr) + svc("sig-dr6", sctpDR6, true, dr)
}

// TestSCTP proves SCTP virtual services on the real kernel: IPVS holds
// them as lbd plan says (ipvsadm's --sctp-service), the packet filter's
// sets hold "VIP,sctp:PORT"; NAT (IPv4 and IPv6) spreads new associations
// over both real servers; direct routing keeps the client's address and
// its replies bypass the director; lbd's SCTP check finds a stopped real
// server, which NAT services remove and DR ones drain, and finds it back;
// a restart writes nothing.
func TestSCTP(t *testing.T) {
	e := &sctpEnv{fwdEnv: newForwardEnv(t)}
	loadSCTP(t)
	for _, rs := range e.tp.RealServers {
		e.sctp = append(e.sctp, rs.StartBackend(t, topo.BackendConfig{ID: rs.Host, SCTPPort: topo.BackendSCTPPort}))
	}
	e.realServerSetup(t, "--method", "dr", "--vip", sctpDR.Addr().String(), "--vip", sctpDR6.Addr().String())
	e.l = startLBD(t, e.dir, e.config())
	waitIPVS(t, e.dir, "IPVS to hold the SCTP services as lbd plan says", e.l.plan(t))

	t.Run("ipvsadm and ipset show SCTP", e.kernelForms)
	t.Run("NAT spreads new associations", func(t *testing.T) {
		for _, target := range []netip.AddrPort{sctpNAT, sctpNAT6} {
			waitServes(t, e.client, topo.SCTP, target)
			answers := probeOK(t, e.client, topo.SCTP, target, 10)
			if per := answers.ByServer(); per["rs1"] != 5 || per["rs2"] != 5 {
				t.Errorf("rr through %s: %v; want 5 and 5", target, per)
			}
			want := e.dir.Addr(e.tp.Backend)
			if target.Addr().Is6() {
				want = e.dir.Addr6(e.tp.Backend)
			}
			if a := answers[0].Client; a != want {
				t.Errorf("the real server saw %s through %s; want the director's %s (snat = auto, no local_networks)", a, target, want)
			}
		}
	})
	t.Run("direct routing", e.direct)
	t.Run("the SCTP check", e.checker)
	t.Run("a stopped real server is removed or drained", e.stopped)
	t.Run("a restart writes nothing", func(t *testing.T) {
		restartWritesNothing(t, e.l, " (an SCTP virtual server not read back as lbd's?)")
		waitIPVS(t, e.dir, "the SCTP services kept", e.l.plan(t))
		probeOK(t, e.client, topo.SCTP, sctpNAT, 2)
	})
}

// kernelForms checks the SCTP services as ipvsadm lists them and the
// entries of lbd's sets, written as kube-proxy writes SCTP ones.
func (e *sctpEnv) kernelForms(t *testing.T) {
	list := e.dir.MustExec(t, "ipvsadm", "-Ln")
	for _, vs := range []netip.AddrPort{sctpNAT, sctpNAT6, sctpDR, sctpDR6} {
		if !regexp.MustCompile(`(?m)^SCTP\s+` + regexp.QuoteMeta(vs.String()) + ` rr\s*$`).MatchString(list) {
			t.Errorf("ipvsadm -Ln does not list SCTP %s rr:\n%s", vs, list)
		}
	}
	rs1 := netip.AddrPortFrom(e.tp.RealServers[0].Addr(e.tp.Backend), topo.BackendSCTPPort)
	if !regexp.MustCompile(`(?m)^\s+-> ` + regexp.QuoteMeta(rs1.String()) + `\s+Masq\s+1\s`).MatchString(list) {
		t.Errorf("ipvsadm -Ln does not list %s as a NAT real server of weight 1:\n%s", rs1, list)
	}
	for _, c := range []struct{ set, entry string }{
		{"LBD-SERVICES", fmt.Sprintf("%s,sctp:%d", sctpNAT.Addr(), sctpNAT.Port())},
		{"LBD-SERVICES", fmt.Sprintf("%s,sctp:%d", sctpDR.Addr(), sctpDR.Port())},
		{"LBD6-SERVICES", fmt.Sprintf("%s,sctp:%d", sctpNAT6.Addr(), sctpNAT6.Port())},
		{"LBD-MASQ-AUTO", fmt.Sprintf("%s,sctp:%d", sctpNAT.Addr(), sctpNAT.Port())},
		{"LBD-NOTRACK", fmt.Sprintf("%s,sctp:%d", sctpDR.Addr(), sctpDR.Port())},
		{"LBD6-NOTRACK", fmt.Sprintf("%s,sctp:%d", sctpDR6.Addr(), sctpDR6.Port())},
		{"LBD-LOOPBACK", fmt.Sprintf("%s,sctp:%d,%s", rs1.Addr(), rs1.Port(), rs1.Addr())},
	} {
		if out := e.dir.MustExec(t, "ipset", "list", c.set); !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(c.entry) + `$`).MatchString(out) {
			t.Errorf("ipset %s lacks %s:\n%s", c.set, c.entry, out)
		}
	}
}

// direct sends associations through the DR services: both real servers
// answer, with the client's own address, and IPVS sends nothing back out
// (the replies go from the real servers to the client).
func (e *sctpEnv) direct(t *testing.T) {
	for _, c := range []struct {
		target netip.AddrPort
		client netip.Addr
	}{{sctpDR, e.client.Addr(e.tp.Clients)}, {sctpDR6, e.client.Addr6(e.tp.Clients)}} {
		waitServes(t, e.client, topo.SCTP, c.target)
		answers := probeOK(t, e.client, topo.SCTP, c.target, 10)
		if per := answers.ByServer(); per["rs1"] != 5 || per["rs2"] != 5 {
			t.Errorf("rr through %s: %v; want 5 and 5", c.target, per)
		}
		if a := answers[0].Client; a != c.client {
			t.Errorf("the real server saw client %s through %s; want %s (direct routing keeps the client's address)", a, c.target, c.client)
		}
		var in, out uint64
		eventually(t, "IPVS to count the associations' packets", func() error {
			if in, out = sctpPackets(t, e.dir, c.target); in < 10 {
				return fmt.Errorf("IPVS counted %d packets in so far", in)
			}
			return nil
		})
		t.Logf("FIGURE SCTP direct routing through %s, 10+ associations: IPVS in %d packets, out %d", c.target, in, out)
		if out != 0 {
			t.Errorf("IPVS sent %d packets out for %s; want the replies to bypass the director", out, c.target)
		}
	}
}

// sctpPackets reads an SCTP virtual server's packet counters.
func sctpPackets(t *testing.T, dir *topo.Director, target netip.AddrPort) (in, out uint64) {
	t.Helper()
	text := dir.MustExec(t, "ipvsadm", "-L", "-n", "--stats", "--exact")
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 7 && f[0] == "SCTP" && f[1] == target.String() {
			in, _ = strconv.ParseUint(f[3], 10, 64)
			out, _ = strconv.ParseUint(f[4], 10, 64)
			return in, out
		}
	}
	t.Fatalf("no counters for SCTP %s in:\n%s", target, text)
	return 0, 0
}

// checker runs lbd's SCTP checker in the director's namespace against
// every real server address, IPv4 and IPv6, and times it; a port nothing
// listens on is refused.
func (e *sctpEnv) checker(t *testing.T) {
	c, err := healthcheck.NewChecker(config.HealthCheck{Type: config.CheckSCTP, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 10
	var checked int
	var took time.Duration
	err = netnsrun.Do(netnsPath(e.dir), func() error {
		for _, rs := range e.tp.RealServers {
			for _, a := range []netip.Addr{rs.Addr(e.tp.Backend), rs.Addr6(e.tp.Backend)} {
				target := healthcheck.Target{Addr: netip.AddrPortFrom(a, topo.BackendSCTPPort)}
				start := time.Now()
				for range rounds {
					if err := c.Check(context.Background(), target); err != nil {
						return fmt.Errorf("%s: %w", target.Addr, err)
					}
				}
				took += time.Since(start)
				checked += rounds
				// Nothing listens on the next port: the real server's
				// kernel answers the INIT with an ABORT.
				closed := healthcheck.Target{Addr: netip.AddrPortFrom(a, topo.BackendSCTPPort+1)}
				if err := c.Check(context.Background(), closed); !errors.Is(err, syscall.ECONNREFUSED) {
					return fmt.Errorf("%s, where nothing listens: %v; want connection refused", closed.Addr, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("SCTP check: %v", err)
	}
	t.Logf("FIGURE %d SCTP checks of listening real servers from the director: %s each on average (guest clock, under emulation)",
		checked, (took / time.Duration(checked)).Round(time.Microsecond))
}

// stopped stops rs1's SCTP backend: lbd's check sees it refused (the real
// server's kernel ABORTs the INIT); every service takes it to weight 0 at
// once, and new associations go to rs2; the NAT services (remove) then
// delete it once IPVS holds no association of it, the DR ones (drain)
// keep it at 0. Started again, it comes back everywhere.
func (e *sctpEnv) stopped(t *testing.T) {
	rs1 := e.tp.RealServers[0]
	r4, r6 := netip.AddrPortFrom(rs1.Addr(e.tp.Backend), topo.BackendSCTPPort), netip.AddrPortFrom(rs1.Addr6(e.tp.Backend), topo.BackendSCTPPort)
	t.Logf("FIGURE IPVS's SCTP entries before rs1 stops: %s", sctpConnStates(t, e.dir))
	e.sctp[0].Stop()
	stopped := time.Now()
	waitRules(t, e.dir, "rs1 at weight 0 in every SCTP service",
		fmt.Sprintf("-a --sctp-service %s -r %s -m -w 0", sctpNAT, r4), fmt.Sprintf("-a --sctp-service %s -r %s -m -w 0", sctpNAT6, r6),
		fmt.Sprintf("-a --sctp-service %s -r %s -g -w 0", sctpDR, r4), fmt.Sprintf("-a --sctp-service %s -r %s -g -w 0", sctpDR6, r6))
	t.Logf("FIGURE rs1's SCTP backend stopped: at weight 0 everywhere after %s (guest clock)", time.Since(stopped).Round(100*time.Millisecond))
	status := e.dir.MustExec(t, e.l.bin, "status", "--socket", e.l.socket())
	if !strings.Contains(status, "sctp DOWN") || !strings.Contains(status, "connection refused") {
		t.Errorf("lbd status does not show rs1's SCTP check down, refused:\n%s", status)
	}
	// Errors, not fatal: rs1 must come back for the subtests after this.
	for _, target := range []netip.AddrPort{sctpNAT, sctpNAT6, sctpDR, sctpDR6} {
		answers, err := e.client.Probe(topo.SCTP, target, 4, requestTimeout)
		if per := answers.ByServer(); err != nil || per["rs2"] != 4 {
			t.Errorf("with rs1 down, through %s: %v, %v %v; want all 4 on rs2", target, per, answers.Errors(), err)
		}
	}
	// Removed, a real server is drained first: deleted at the first full
	// sync that finds no association of it in IPVS's table (or after
	// drain_timeout), as a TCP one once its connections end. IPVS keeps
	// a closed association's entry for its largest RTO, 61 s.
	poll.Until(t, "rs1 deleted from the NAT services", 3*time.Minute, func() error {
		got := ipvsadmSave(t, e.dir)
		for _, frag := range []string{fmt.Sprintf("-a --sctp-service %s -r %s ", sctpNAT, r4), fmt.Sprintf("-a --sctp-service %s -r %s ", sctpNAT6, r6)} {
			if slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, frag) }) {
				return fmt.Errorf("ipvsadm -Sn still has %q; IPVS's SCTP entries: %s", frag, sctpConnStates(t, e.dir))
			}
		}
		return nil
	})
	t.Logf("FIGURE rs1 deleted from the NAT services %s after it stopped (guest clock)", time.Since(stopped).Round(100*time.Millisecond))
	waitRules(t, e.dir, "rs1 still drained in the DR services",
		fmt.Sprintf("-a --sctp-service %s -r %s -g -w 0", sctpDR, r4), fmt.Sprintf("-a --sctp-service %s -r %s -g -w 0", sctpDR6, r6))
	e.sctp[0] = rs1.StartBackend(e.root, topo.BackendConfig{ID: rs1.Host, SCTPPort: topo.BackendSCTPPort})
	// lbd plan knows no health: it is every real server at its weight.
	waitIPVS(t, e.dir, "rs1 back in every SCTP service", e.l.plan(t))
}

// sctpConnStates sums up IPVS's SCTP connection entries (ipvsadm -Lnc:
// "pro expire state source virtual destination"): how many in each
// state, and the longest time one has left.
func sctpConnStates(t *testing.T, dir *topo.Director) string {
	t.Helper()
	states := map[string]int{}
	longest := ""
	for _, line := range strings.Split(dir.MustExec(t, "ipvsadm", "-Lnc"), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "SCTP" {
			states[f[2]]++
			longest = max(longest, f[1]) // mm:ss compares as text
		}
	}
	return fmt.Sprintf("%v, the longest with %s left", states, longest)
}
