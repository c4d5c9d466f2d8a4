//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestHealthChecks proves that lbd's checks steer real traffic: a real
// server whose process dies is drained and gets no new connection, comes
// back after rise passing checks once restarted; below quorum the sorry
// server serves; with no healthy real server and no sorry server new
// connections are refused at once; a restart of lbd keeps a real server a
// failing check held at weight 0 there, even with initial_state healthy;
// and a restart while every real server is healthy changes no weight, even
// with initial_state unhealthy.
func TestHealthChecks(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 3})
	var backends []*topo.Process
	for _, rs := range tp.RealServers {
		backends = append(backends, rs.StartBackend(t, topo.BackendConfig{HTTPPort: topo.BackendHTTPPort}))
	}
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	parent := t // backends restarted in a subtest must outlive it
	rs := func(i int) string { return tp.RealServers[i].Addr(tp.Backend).String() }
	check := `health_check = { type = "http", path = "/healthz", interval = "500ms", timeout = "300ms", rise = 2, fall = 2, initial_state = "unhealthy" }`
	l := startLBD(t, dir, fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "2s"

[[service]]
name = "web"
vips = ["%[1]s"]
port = 80
scheduler = "rr"
snat = "never"
%[5]s
real_server = [{ address = "%[6]s" }, { address = "%[7]s" }]

[[service]]
name = "quorum"
vips = ["%[2]s"]
port = 80
scheduler = "rr"
snat = "never"
quorum = 2
sorry_server = "%[8]s:80"
%[5]s
real_server = [{ address = "%[6]s" }, { address = "%[7]s" }]

[[service]]
name = "alone"
vips = ["%[3]s"]
port = 80
snat = "never"
%[5]s
real_server = [{ address = "%[6]s" }]

[[service]]
name = "optimist"
vips = ["%[4]s"]
port = 80
scheduler = "rr"
snat = "never"
health_check = { type = "http", path = "/healthz", interval = "500ms", timeout = "300ms", rise = 2, fall = 2 }
real_server = [{ address = "%[6]s" }, { address = "%[7]s" }]
`, topo.VIP(1), topo.VIP(2), topo.VIP(3), topo.VIP(4), check, rs(0), rs(1), rs(2)))
	web, quorum, alone := netip.AddrPortFrom(topo.VIP(1), 80), netip.AddrPortFrom(topo.VIP(2), 80), netip.AddrPortFrom(topo.VIP(3), 80)
	optimist := netip.AddrPortFrom(topo.VIP(4), 80) // initial_state healthy
	weight := func(vs netip.AddrPort, real string, w int) string {
		return fmt.Sprintf("-a -t %s -r %s:80 -m -w %d", vs, real, w)
	}
	// initial_state unhealthy: weight 0 until rise=2 checks pass.
	waitRules(t, dir, "every real server up after its first checks", weight(web, rs(0), 1), weight(web, rs(1), 1), weight(quorum, rs(0), 1), weight(alone, rs(0), 1), weight(optimist, rs(0), 1))
	waitServes(t, client, topo.HTTP, web)

	t.Run("a dead real server is drained and gets no new connection", func(t *testing.T) {
		killed := time.Now()
		backends[0].Stop()
		// Detection latency, for the note (not asserted): kill -> kernel.
		for time.Since(killed) < settleLimit && !slices.Contains(ipvsadmSave(t, dir), weight(web, rs(0), 0)) {
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("detection latency (kill -> weight 0 in IPVS): %v; interval 500ms x fall 2 + min_sync_period 100ms = 1.1s",
			time.Since(killed).Round(10*time.Millisecond))
		waitRules(t, dir, "rs1 drained", weight(web, rs(0), 0))
		if per := probeOK(t, client, topo.HTTP, web, 10).ByServer(); per["rs2"] != 10 {
			t.Errorf("answers %v; want all from rs2", per)
		}
		out := dir.MustExec(t, l.bin, "status", "--socket", l.socket())
		if !strings.Contains(out, "http DOWN") {
			t.Errorf("lbd status does not show rs1 down:\n%s", out)
		}
	})

	t.Run("below quorum the sorry server serves", func(t *testing.T) {
		waitRules(t, dir, "the sorry server in", weight(quorum, rs(2), 1), weight(quorum, rs(1), 0))
		if per := probeOK(t, client, topo.HTTP, quorum, 6).ByServer(); per["rs3"] != 6 {
			t.Errorf("answers %v; want all from the sorry server rs3", per)
		}
	})

	t.Run("with no healthy real server new connections are refused at once", func(t *testing.T) {
		waitRules(t, dir, "alone's only real server drained", weight(alone, rs(0), 0))
		start := time.Now()
		answers, err := client.Probe(topo.HTTP, alone, 1, requestTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if errs := answers.Errors(); len(errs) != 1 || !strings.Contains(errs[0], "refused") {
			t.Errorf("got %+v after %v; want connection refused, not a black hole", answers, time.Since(start))
		}
	})

	t.Run("restarting lbd keeps a real server its failing check held at weight 0", func(t *testing.T) {
		waitRules(t, dir, "optimist's rs1 drained", weight(optimist, rs(0), 0), weight(optimist, rs(1), 1))
		before := ipvsadmSave(t, dir)
		l.kill(t)
		// Its check starts unhealthy although initial_state is healthy:
		// the kernel held it at 0, so no sync may hand it traffic while
		// the checks warm up.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if after := ipvsadmSave(t, dir); !slices.Equal(before, after) {
				t.Fatalf("IPVS changed after the restart:\nbefore %v\nafter  %v", before, after)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("a restarted real server comes back after rise", func(t *testing.T) {
		backends[0] = tp.RealServers[0].StartBackend(parent, topo.BackendConfig{HTTPPort: topo.BackendHTTPPort})
		waitRules(t, dir, "rs1 back", weight(web, rs(0), 1), weight(quorum, rs(0), 1), weight(alone, rs(0), 1), weight(optimist, rs(0), 1))
		waitRules(t, dir, "the sorry server gone", weight(quorum, rs(1), 1))
		if s := strings.Join(ipvsadmSave(t, dir), "\n"); strings.Contains(s, rs(2)+":80 -m -w 1") {
			t.Errorf("the sorry server still takes connections:\n%s", s)
		}
		if per := probeOK(t, client, topo.HTTP, web, 10).ByServer(); per["rs1"] != 5 {
			t.Errorf("answers %v; want rs1 back with half", per)
		}
	})

	t.Run("restarting lbd with every real server healthy changes no weight", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		l.kill(t)
		mark := len(l.proc.Output())
		// Checks start with initial_state unhealthy; the kernel's weights
		// seed them healthy, so nothing may be written while they warm up.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if after := ipvsadmSave(t, dir); !slices.Equal(before, after) {
				t.Fatalf("IPVS changed after the restart:\nbefore %v\nafter  %v", before, after)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out := sinceLog(l.proc, mark); strings.Contains(out, "sync applied") || strings.Contains(out, "real server down") {
			t.Errorf("the restarted lbd changed something:\n%s", out)
		}
	})
}
