//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// consulAgent is a real Consul server agent on the director's loopback,
// with a data directory so that a restart keeps its catalog (as a
// production agent does).
type consulAgent struct {
	t       *testing.T
	dir     *topo.Director
	bin     string
	dataDir string
	proc    *topo.Process
}

const consulAddr = "http://127.0.0.1:8500"

func startConsul(t *testing.T, dir *topo.Director) *consulAgent {
	t.Helper()
	a := &consulAgent{t: t, dir: dir, bin: topo.RequireSharedFile(t, "consul"), dataDir: filepath.Join(t.TempDir(), "consul")}
	if err := os.MkdirAll(a.dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	a.start()
	return a
}

func (a *consulAgent) start() {
	a.t.Helper()
	a.proc = a.dir.Start(a.t, "consul", a.bin, "agent", "-server", "-bootstrap-expect=1", "-node=director",
		"-bind=127.0.0.1", "-client=127.0.0.1", "-data-dir="+a.dataDir, "-log-level=warn", "-ui=false",
		"-dns-port=-1", "-grpc-port=-1")
	eventually(a.t, "Consul to elect itself leader", func() error {
		out, err := a.dir.HTTP("GET", consulAddr+"/v1/status/leader", "")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == `""` {
			return fmt.Errorf("no leader yet")
		}
		// The agent answers before its node is in the catalog.
		_, err = a.dir.HTTP("GET", consulAddr+"/v1/catalog/node/director", "")
		return err
	})
}

func (a *consulAgent) call(method, path string, body any) string {
	a.t.Helper()
	var text string
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		text = string(b)
	}
	out, err := a.dir.HTTP(method, consulAddr+path, text)
	if err != nil {
		a.t.Fatal(err)
	}
	return out
}

// register registers a service instance on the agent; with ttl, it gets a
// TTL check (initially passing) named "<id>-ttl".
func (a *consulAgent) register(id, service string, addr netip.AddrPort, ttl bool, tags []string, meta map[string]string) {
	a.t.Helper()
	reg := map[string]any{"ID": id, "Name": service, "Address": addr.Addr().String(), "Port": addr.Port(), "Tags": tags, "Meta": meta}
	if ttl {
		reg["Check"] = map[string]any{"CheckID": id + "-ttl", "TTL": "1h", "Status": "passing"}
	}
	a.call("PUT", "/v1/agent/service/register", reg)
}

func (a *consulAgent) deregister(id string) { a.call("PUT", "/v1/agent/service/deregister/"+id, nil) }

// checkStatus returns the status of every check of a Consul service.
func (a *consulAgent) checkStatus(service string) []string {
	a.t.Helper()
	var checks []struct{ Status, ServiceID string }
	if err := json.Unmarshal([]byte(a.call("GET", "/v1/health/checks/"+service, nil)), &checks); err != nil {
		a.t.Fatal(err)
	}
	var out []string
	for _, c := range checks {
		out = append(out, c.ServiceID+"="+c.Status)
	}
	slices.Sort(out)
	return out
}

// TestConsul proves the Consul source end to end, with a real agent and
// real traffic: registering a real server in Consul makes traffic through
// the VIP reach it, a critical check drains it, deregistering it stops new
// connections to it; a Consul-defined virtual service appears and goes
// away; lbd's VIP registration follows the service's health; with the
// agent stopped nothing Consul-sourced changes while a file edit still
// applies; after its restart changes flow again.
func TestConsul(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 3})
	for _, rs := range tp.RealServers {
		rs.StartBackend(t, topo.BackendConfig{HTTPPort: topo.BackendHTTPPort})
	}
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	agent := startConsul(t, dir)
	rs := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(tp.RealServers[i].Addr(tp.Backend), topo.BackendHTTPPort)
	}
	web, api, static := netip.AddrPortFrom(topo.VIP(1), 80), netip.AddrPortFrom(topo.VIP(2), 80), netip.AddrPortFrom(topo.VIP(3), 80)
	mass := netip.AddrPortFrom(topo.VIP(4), 80)
	config := fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "3s"

[consul]
address = "127.0.0.1:8500"

[consul.virtual_services]
tag = "lbd"
vip_pools = ["%[2]s/32"]
real_server_networks = ["198.18.0.0/15"]

[[service]]
name = "web"
vips = ["%[1]s"]
port = 80
scheduler = "rr"
snat = "never"
[service.consul]
service = "web"
[service.consul_register]
name = "web-vip"
tags = ["edge"]

[[service]]
name = "mass"
vips = ["%[3]s"]
port = 80
scheduler = "rr"
snat = "never"
on_unhealthy = "remove"
[service.consul]
service = "mass"
`, web.Addr(), api.Addr(), mass.Addr())
	l := startLBD(t, dir, config)
	dest := func(vs, real netip.AddrPort, w int) string {
		return fmt.Sprintf("-a -t %s -r %s -m -w %d", vs, real, w)
	}
	// The configuration with a file service, static, of the given weight.
	withStatic := func(weight int) string {
		return config + fmt.Sprintf("\n[[service]]\nname = \"static\"\nvips = [\"%s\"]\nport = 80\nsnat = \"never\"\nreal_server = [{ address = \"%s\", port = %d, weight = %d }]\n",
			static.Addr(), rs(2).Addr(), rs(2).Port(), weight)
	}
	servers := func(target netip.AddrPort, n int) map[string]int {
		t.Helper()
		return probeOK(t, client, topo.HTTP, target, n).ByServer()
	}

	t.Run("a registered real server gets traffic", func(t *testing.T) {
		agent.register("web-1", "web", rs(0), false, nil, nil)
		waitRules(t, dir, "web-1 in IPVS", dest(web, rs(0), 1))
		// The packet filter, written beside IPVS, stops refusing the VIP's
		// port (no real server until now) a moment later.
		waitServes(t, client, topo.HTTP, web)
		if got := servers(web, 4); got["rs1"] != 4 {
			t.Errorf("answers by server %v; want all 4 from rs1", got)
		}
		agent.register("web-2", "web", rs(1), true, nil, map[string]string{"lbd-weight": "3"})
		waitRules(t, dir, "web-2 in IPVS with its meta weight", dest(web, rs(0), 1), dest(web, rs(1), 3))
		l.waitLog(t, "the log to say where web-2 comes from",
			fmt.Sprintf(`msg="real server added" virtual_server=%s/tcp real_server=%s weight=3 source="consul director/web-2"`, web, rs(1)))
		if got := servers(web, 8); got["rs1"] == 0 || got["rs2"] == 0 {
			t.Errorf("answers by server %v; want both real servers", got)
		}
	})

	t.Run("lbd registers its VIP, passing while the service is healthy", func(t *testing.T) {
		id := fmt.Sprintf("lbd-web-%s-80-tcp", web.Addr())
		eventually(t, "the VIP registration to pass", func() error {
			if got := agent.checkStatus("web-vip"); !slices.Equal(got, []string{id + "=passing"}) {
				return fmt.Errorf("web-vip checks %v", got)
			}
			return nil
		})
	})

	t.Run("a critical check drains, deregistering stops new connections", func(t *testing.T) {
		agent.call("PUT", "/v1/agent/check/fail/web-2-ttl", nil)
		waitRules(t, dir, "web-2 drained", dest(web, rs(0), 1), dest(web, rs(1), 0))
		if got := servers(web, 6); got["rs2"] != 0 {
			t.Errorf("a drained real server got new connections: %v", got)
		}
		agent.call("PUT", "/v1/agent/check/pass/web-2-ttl", nil)
		waitRules(t, dir, "web-2 back", dest(web, rs(1), 3))
		agent.deregister("web-1")
		waitRules(t, dir, "web-1 out of the desired state", "!"+rs(0).String()+" -m -w 1")
		if got := servers(web, 6); got["rs1"] != 0 || got["rs2"] != 6 {
			t.Errorf("answers by server %v; want all from rs2 after web-1 left", got)
		}
	})

	t.Run("a Consul-defined virtual service appears and goes away", func(t *testing.T) {
		meta := map[string]string{"lbd-vip": api.Addr().String(), "lbd-port": "80", "lbd-scheduler": "rr", "lbd-snat": "never"}
		agent.register("api-1", "api", rs(2), false, []string{"lbd"}, meta)
		// Outside the pool: refused and reported, the others unaffected.
		agent.register("rogue-1", "rogue", rs(2), false, []string{"lbd"}, map[string]string{"lbd-vip": topo.VIP(9).String(), "lbd-port": "80"})
		waitRules(t, dir, "the api virtual service", "-A -t "+api.String()+" -s rr", dest(api, rs(2), 1))
		if got := servers(api, 4); got["rs3"] != 4 {
			t.Errorf("answers by server %v; want all from rs3", got)
		}
		out := dir.MustExec(t, l.bin, "status", "--socket", l.socket())
		if !strings.Contains(out, `consul service "rogue": meta lbd-vip: `+topo.VIP(9).String()+` (VIP 1) is outside the VIP pools`) {
			t.Errorf("lbd status does not report the refused registration:\n%s", out)
		}
		if strings.Contains(strings.Join(ipvsadmSave(t, dir), "\n"), topo.VIP(9).String()) {
			t.Errorf("a VIP outside the pools reached IPVS")
		}
		agent.deregister("api-1")
		agent.deregister("rogue-1")
		waitRules(t, dir, "the api virtual service gone", "!-A -t "+api.String())
	})

	t.Run("a hostile registration cannot reach the director's own port through the VIP", func(t *testing.T) {
		// A port the director itself listens on, as its sshd would.
		own := netip.AddrPortFrom(dir.Addr(tp.Backend), 2222)
		dir.StartBackend(t, topo.BackendConfig{ID: "director-own", HTTPPort: int(own.Port())})
		meta := map[string]string{"lbd-vip": api.Addr().String(), "lbd-port": "2222", "lbd-snat": "never"}
		agent.register("evil-1", "evil", own, false, []string{"lbd"}, meta)
		eventually(t, "the refusal in lbd status", func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil || !strings.Contains(out, "address "+own.Addr().String()+" is this director's own address") {
				return fmt.Errorf("lbd status (%v):\n%s", err, out)
			}
			return nil
		})
		if got := strings.Join(ipvsadmSave(t, dir), "\n"); strings.Contains(got, "-r "+own.String()) {
			t.Errorf("the director's own address reached IPVS:\n%s", got)
		}
		if answers, err := client.Probe(topo.HTTP, netip.AddrPortFrom(api.Addr(), 2222), 2, requestTimeout); err == nil && len(answers.Errors()) == 0 {
			t.Errorf("a client reached the director's own port through the VIP: %v", answers.ByServer())
		}
		agent.deregister("evil-1")
	})

	t.Run("Consul stopped: nothing Consul-sourced changes, file edits apply", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		agent.proc.Stop()
		eventually(t, "lbd status to say Consul is unreachable", func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil || !strings.Contains(out, "consul: UNREACHABLE") {
				return fmt.Errorf("lbd status:\n%s (%v)", out, err)
			}
			return nil
		})
		l.writeConfig(t, withStatic(1))
		waitRules(t, dir, "the file edit applied", dest(static, rs(2), 1))
		for _, line := range before {
			waitRules(t, dir, "Consul-sourced state kept", line)
		}
		if got := servers(web, 4); got["rs2"] != 4 {
			t.Errorf("web answers %v while Consul is down; want rs2 as before", got)
		}
	})

	t.Run("lbd restarted while Consul is down waits for its first answer and changes nothing", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		l.kill(t)
		l.waitLog(t, "lbd to say it waits for Consul", "waiting for Consul's first answer")
		// Without Consul's answer a sync would drain every Consul real
		// server: none may run.
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if after := ipvsadmSave(t, dir); !slices.Equal(before, after) {
				t.Fatalf("IPVS changed before Consul answered:\nbefore %v\nafter  %v", before, after)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if out := l.proc.Output(); strings.Contains(out, "sync applied") {
			t.Errorf("lbd synced before Consul answered:\n%s", out)
		}
	})

	t.Run("Consul restarted: changes flow again", func(t *testing.T) {
		agent.start()
		agent.register("web-3", "web", rs(2), true, nil, nil)
		waitRules(t, dir, "web-3 in IPVS after the restart", dest(web, rs(1), 3), dest(web, rs(2), 1))
	})

	t.Run("the VIP registration fails with the service", func(t *testing.T) {
		// Failing checks drain (weight 0); deregistering both would be a
		// mass deletion that the safety valve holds.
		agent.call("PUT", "/v1/agent/check/fail/web-2-ttl", nil)
		agent.call("PUT", "/v1/agent/check/fail/web-3-ttl", nil)
		id := fmt.Sprintf("lbd-web-%s-80-tcp", web.Addr())
		eventually(t, "the VIP registration to turn critical", func() error {
			if got := agent.checkStatus("web-vip"); !slices.Equal(got, []string{id + "=critical"}) {
				return fmt.Errorf("web-vip checks %v", got)
			}
			return nil
		})
	})

	t.Run("Consul dropping most real servers at once is held; other changes still apply", func(t *testing.T) {
		// mass removes critical instances (on_unhealthy = "remove"); its 4
		// are more than half of the 7 real servers lbd serves, and node
		// maintenance makes them all critical in one change of Consul.
		tp.RealServers[0].StartBackend(t, topo.BackendConfig{ID: "rs1-8080", HTTPPort: 8080})
		var kept []string
		for i, a := range []netip.AddrPort{rs(0), rs(1), rs(2), netip.AddrPortFrom(rs(0).Addr(), 8080)} {
			agent.register(fmt.Sprintf("mass-%d", i+1), "mass", a, false, nil, nil)
			kept = append(kept, dest(mass, a, 1))
		}
		waitRules(t, dir, "mass's 4 real servers", kept...)
		agent.call("PUT", "/v1/agent/maintenance?enable=true&reason=e2e", nil)
		eventually(t, "lbd status to report the held deletions", func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil || !strings.Contains(out, "HELD by the safety valve") {
				return fmt.Errorf("lbd status:\n%s (%v)", out, err)
			}
			return nil
		})
		waitRules(t, dir, "mass's real servers kept", kept...)
		// A new virtual service is no deletion: it goes in while they are held.
		agent.register("api-2", "api", rs(2), false, []string{"lbd"},
			map[string]string{"lbd-vip": api.Addr().String(), "lbd-port": "80", "lbd-scheduler": "rr", "lbd-snat": "never"})
		waitRules(t, dir, "the api virtual service added beside the held deletions", append(kept, "-A -t "+api.String()+" -s rr")...)
		if got := servers(mass, 8); len(got) != 4 {
			t.Errorf("mass answers %v while its deletions are held; want all 4 real servers", got)
		}
		// A restart with the files unchanged: the first sync is guarded
		// against the kernel's state.
		l.kill(t)
		l.waitLog(t, "the restarted lbd to hold the deletions", "safety valve: deletions held")
		waitRules(t, dir, "mass's real servers kept across the restart", kept...)
		// An edit of another service goes in; the deletions stay held.
		l.writeConfig(t, withStatic(2))
		waitRules(t, dir, "the edit of static applied, mass's real servers still kept", append(kept, dest(static, rs(2), 2))...)
		agent.call("PUT", "/v1/agent/maintenance?enable=false", nil)
		agent.deregister("api-2")
		waitRules(t, dir, "maintenance over", append(kept, "!-A -t "+api.String())...)
	})

	if os.Getenv("LBD_E2E_BENCH") == "1" {
		consulLatency(t, agent, dir, web, rs(0))
	}
}

// consulLatency measures registration -> kernel over 100 changes (each a
// register or a deregister of one instance), polling ipvsadm every 20 ms.
func consulLatency(t *testing.T, agent *consulAgent, dir *topo.Director, vs, real netip.AddrPort) {
	var took []time.Duration
	line := fmt.Sprintf("-a -t %s -r %s -m -w 1", vs, real)
	for i := range 100 {
		start := time.Now()
		want := i%2 == 0
		if want {
			agent.register("lat", "web", real, false, nil, nil)
		} else {
			agent.deregister("lat")
		}
		for {
			if slices.Contains(ipvsadmSave(t, dir), line) == want {
				break
			}
			if time.Since(start) > time.Minute {
				t.Fatalf("change %d not in the kernel after a minute", i)
			}
			time.Sleep(20 * time.Millisecond)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("BENCH consul registration -> kernel over %d changes: median %s, p99 %s, max %s (min_sync_period 100ms; guest timings, compare as ratios)",
		len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)*99/100].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
}
