//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// dataplaneConfig is the configuration TestDataplane starts lbd with:
// round robin, weighted round robin 3:1, client-IP affinity and a UDP
// service, each on its own VIP, over the topology's real servers.
func dataplaneConfig(tp *topo.Topology, extra string) string {
	rs := func(i int) string { return tp.RealServers[i].Addr(tp.Backend).String() }
	return fmt.Sprintf(`
[sync]
min_sync_period = "200ms"
sync_period = "2s"

[[service]]
name = "rr"
vips = ["%[1]s"]
port = 80
scheduler = "rr"
health_check = { type = "none" }
real_server = [{ address = "%[5]s" }, { address = "%[6]s" }]

[[service]]
name = "wrr"
vips = ["%[2]s"]
port = 80
scheduler = "wrr"
health_check = { type = "none" }
real_server = [{ address = "%[5]s", weight = 3 }, { address = "%[6]s", weight = 1 }]

[[service]]
name = "sticky"
vips = ["%[3]s"]
port = 80
scheduler = "rr"
session_affinity = true
health_check = { type = "none" }
real_server = [{ address = "%[5]s" }, { address = "%[6]s" }]

[[service]]
name = "dns"
vips = ["%[4]s"]
port = 53
protocol = "udp"
real_server = [{ address = "%[5]s" }, { address = "%[6]s" }]
%[7]s`, topo.VIP(1), topo.VIP(2), topo.VIP(3), topo.VIP(4), rs(0), rs(1), extra)
}

// TestDataplane starts lbd from a TOML file and proves with real traffic
// and with ipvsadm/ip that it programs IPVS and the VIPs, follows edits,
// repairs drift, survives SIGKILL without touching the kernel, cleans UDP
// conntrack entries, and never touches what is not its own. The subtests
// share one topology and one lbd to keep the suite inside CI's budget;
// each builds on the state the previous one left.
func TestDataplane(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{Clients: 2, RealServers: 3})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	client, client2 := tp.ClientHosts[0], tp.ClientHosts[1]
	rr, wrr, sticky := netip.AddrPortFrom(topo.VIP(1), 80), netip.AddrPortFrom(topo.VIP(2), 80), netip.AddrPortFrom(topo.VIP(3), 80)
	dns := netip.AddrPortFrom(topo.VIP(4), 53)
	foreign := netip.AddrPortFrom(topo.VIP(9), 80)

	// Someone else's virtual server, there before lbd: never touched.
	dir.MustExec(t, "ipvsadm", "-A", "-t", foreign.String(), "-s", "rr")

	l := startLBD(t, dir, dataplaneConfig(tp, ""))
	want := append(l.plan(t), "-A -t "+foreign.String()+" -s rr")
	waitIPVS(t, dir, "IPVS to hold what lbd plan says", want)
	eventually(t, "the VIPs on lbd0", func() error {
		got := vipsOn(t, dir)
		want := []string{topo.VIP(1).String() + "/32", topo.VIP(2).String() + "/32", topo.VIP(3).String() + "/32", topo.VIP(4).String() + "/32"}
		if !slices.Equal(got, want) {
			return fmt.Errorf("lbd0 has %v, want %v", got, want)
		}
		return nil
	})

	t.Run("lbd status shows desired and kernel weights", func(t *testing.T) {
		var snap struct {
			Sync     struct{ Writes int }
			Services []struct {
				VirtualServer string `json:"virtual_server"`
				RealServers   []struct {
					Address      string
					Weight       int
					KernelWeight *int `json:"kernel_weight"`
				} `json:"real_servers"`
			}
		}
		eventually(t, "lbd status to answer", func() error {
			out, err := dir.Exec(l.bin, "status", "-o", "json", "--socket", l.socket())
			if err != nil {
				return err
			}
			return json.Unmarshal([]byte(out), &snap)
		})
		if len(snap.Services) != 4 {
			t.Fatalf("status lists %d virtual servers; want 4: %+v", len(snap.Services), snap)
		}
		for _, s := range snap.Services {
			for _, r := range s.RealServers {
				if r.KernelWeight == nil || *r.KernelWeight != r.Weight {
					t.Errorf("%s -> %s: desired weight %d, kernel %v", s.VirtualServer, r.Address, r.Weight, r.KernelWeight)
				}
			}
		}
		t.Logf("lbd status:\n%s", dir.MustExec(t, l.bin, "status", "--socket", l.socket()))
	})

	t.Run("rr spreads requests over every real server", func(t *testing.T) {
		waitServes(t, client, topo.HTTP, rr)
		per := probeOK(t, client, topo.HTTP, rr, 20).ByServer()
		t.Logf("answers per real server: %v", per)
		if per["rs1"] != 10 || per["rs2"] != 10 {
			t.Errorf("rr over two real servers: %v; want 10 each", per)
		}
	})

	t.Run("wrr 3:1 weights give 3:1", func(t *testing.T) {
		per := probeOK(t, client, topo.HTTP, wrr, 40).ByServer()
		t.Logf("answers per real server: %v", per)
		if per["rs1"] != 30 || per["rs2"] != 10 {
			t.Errorf("wrr 3:1 over 40 new connections: %v; want 30 and 10", per)
		}
	})

	t.Run("session affinity keeps a client on one real server", func(t *testing.T) {
		one := probeOK(t, client, topo.HTTP, sticky, 10).ByServer()
		two := probeOK(t, client2, topo.HTTP, sticky, 10).ByServer()
		t.Logf("client1: %v, client2: %v", one, two)
		if len(one) != 1 || len(two) != 1 {
			t.Fatalf("a client was spread over several real servers: %v, %v", one, two)
		}
		for s := range one {
			if two[s] != 0 {
				t.Errorf("rr with affinity put both clients on %s; the second should land on the next real server", s)
			}
		}
	})

	t.Run("a UDP service answers", func(t *testing.T) {
		waitServes(t, client, topo.UDP, dns)
		per := probeOK(t, client, topo.UDP, dns, 10).ByServer()
		if len(per) != 2 {
			t.Errorf("UDP answers per real server: %v; want both", per)
		}
	})

	rs3 := tp.RealServers[2].Addr(tp.Backend).String()
	edited := strings.Replace(dataplaneConfig(tp, fmt.Sprintf(`
[[service]]
name = "added"
vips = ["%s"]
port = 8080
scheduler = "rr"
health_check = { type = "none" }
real_server = [{ address = "%s", port = 80 }]
`, topo.VIP(5), rs3)), `weight = 3 }`, `weight = 5 }`, 1)
	// The rr service loses rs2: it drains (weight 0) for drain_timeout.
	edited = strings.Replace(edited, fmt.Sprintf(`scheduler = "rr"
health_check = { type = "none" }
real_server = [{ address = "%[1]s" }, { address = "%[2]s" }]

[[service]]
name = "wrr"`, tp.RealServers[0].Addr(tp.Backend), tp.RealServers[1].Addr(tp.Backend)), fmt.Sprintf(`scheduler = "rr"
health_check = { type = "none" }
real_server = [{ address = "%[1]s" }]

[[service]]
name = "wrr"`, tp.RealServers[0].Addr(tp.Backend)), 1)

	t.Run("a config edit reaches the kernel without a restart", func(t *testing.T) {
		l.writeConfig(t, edited)
		added := netip.AddrPortFrom(topo.VIP(5), 8080)
		rs2 := netip.AddrPortFrom(tp.RealServers[1].Addr(tp.Backend), 80)
		rs1 := netip.AddrPortFrom(tp.RealServers[0].Addr(tp.Backend), 80)
		want := []string{
			fmt.Sprintf("-A -t %s -s rr", rr), fmt.Sprintf("-a -t %s -r %s -m -w 1", rr, rs1), fmt.Sprintf("-a -t %s -r %s -m -w 0", rr, rs2),
			fmt.Sprintf("-A -t %s -s wrr", wrr), fmt.Sprintf("-a -t %s -r %s -m -w 5", wrr, rs1), fmt.Sprintf("-a -t %s -r %s -m -w 1", wrr, rs2),
			fmt.Sprintf("-A -t %s -s rr", added), fmt.Sprintf("-a -t %s -r %s:80 -m -w 1", added, rs3),
		}
		eventually(t, "the edit in IPVS", func() error {
			got := strings.Join(ipvsadmSave(t, dir), "\n")
			for _, w := range want {
				if !strings.Contains(got, w) {
					return fmt.Errorf("ipvsadm -Sn lacks %q:\n%s", w, got)
				}
			}
			return nil
		})
		waitServes(t, client, topo.HTTP, added)
		if per := probeOK(t, client, topo.HTTP, rr, 6).ByServer(); per["rs1"] != 6 {
			t.Errorf("new connections reached a drained real server: %v", per)
		}
	})

	t.Run("a removed real server drains while its connection lives, returns without a re-add, goes when it ends", func(t *testing.T) {
		// A service of its own: no earlier connection (TIME_WAIT lasts two
		// minutes in IPVS) keeps its real servers busy.
		drain := netip.AddrPortFrom(topo.VIP(6), 80)
		// Its second VIP is already local on lo: lbd must not keep it on
		// lbd0 (it works as it is), nor touch it there.
		onLo := topo.VIP(7).String() + "/32"
		dir.MustExec(t, "ip", "addr", "add", onLo, "dev", "lo")
		defer dir.Exec("ip", "addr", "del", onLo, "dev", "lo")
		loHas := func() bool {
			out, _ := dir.Exec("ip", "-o", "addr", "show", "dev", "lo")
			return strings.Contains(out, " "+onLo+" ")
		}
		rsAddr := map[string]string{"rs1": tp.RealServers[0].Addr(tp.Backend).String(), "rs2": tp.RealServers[1].Addr(tp.Backend).String()}
		service := func(reals ...string) string {
			var rs []string
			for _, r := range reals {
				rs = append(rs, fmt.Sprintf("{ address = %q }", rsAddr[r]))
			}
			return fmt.Sprintf("\n[[service]]\nname = \"drain\"\nvips = [%q, %q]\nport = 80\nscheduler = \"rr\"\nhealth_check = { type = \"none\" }\nreal_server = [%s]\n",
				drain.Addr(), topo.VIP(7), strings.Join(rs, ", "))
		}
		dest := func(r string, w int) string { return fmt.Sprintf("-a -t %s -r %s:80 -m -w %d", drain, rsAddr[r], w) }
		l.writeConfig(t, edited+service("rs1", "rs2"))
		waitRules(t, dir, "the drain service", dest("rs1", 1), dest("rs2", 1))
		waitServes(t, client, topo.HTTP, drain)
		// Addresses on other links are read by full reconciles: one added
		// just before the edit is known by the next one (sync_period 2s).
		eventually(t, "the new VIP on lbd0, the one on lo left there only", func() error {
			if vips := vipsOn(t, dir); !slices.Contains(vips, drain.Addr().String()+"/32") || slices.Contains(vips, onLo) || !loHas() {
				return fmt.Errorf("lbd0 has %v; want %s there and %s left on lo only", vips, drain.Addr(), onLo)
			}
			return nil
		})

		h := client.Hold(t, drain)
		other := map[string]string{"rs1": "rs2", "rs2": "rs1"}[h.Server]
		t.Logf("the held connection is served by %s", h.Server)
		l.writeConfig(t, edited+service(other))
		waitRules(t, dir, "the held real server at weight 0", dest(h.Server, 0), dest(other, 1))
		// Several full reconciles (sync_period 2s) pass: its connection keeps it.
		time.Sleep(6 * time.Second)
		if got := ipvsadmSave(t, dir); !slices.Contains(got, dest(h.Server, 0)) {
			t.Fatalf("a draining real server with a live connection was deleted:\n%s", strings.Join(got, "\n"))
		}
		if a := h.Ask(t); a.Server != h.Server {
			t.Errorf("the held connection was answered by %q (%s), want %s", a.Server, a.Err, h.Server)
		}
		if per := probeOK(t, client, topo.HTTP, drain, 4).ByServer(); per[h.Server] != 0 {
			t.Errorf("new connections reached the draining real server: %v", per)
		}

		l.writeConfig(t, edited+service("rs1", "rs2"))
		waitRules(t, dir, "the weight restored", dest(h.Server, 1))
		if a := h.Ask(t); a.Server != h.Server {
			t.Errorf("after the return the held connection was answered by %q (%s), want %s", a.Server, a.Err, h.Server)
		}

		l.writeConfig(t, edited+service(other))
		waitRules(t, dir, "drained again", dest(h.Server, 0))
		h.Reset() // IPVS forgets a reset connection within 10 s
		waitRules(t, dir, "the drained real server deleted once its connection ended", "!"+fmt.Sprintf("-t %s -r %s:80", drain, rsAddr[h.Server]), dest(other, 1))

		l.writeConfig(t, edited)
		waitRules(t, dir, "the drain service gone", "!-t "+drain.String(), "!-t "+topo.VIP(7).String())
		eventually(t, "the VIP no longer needed unbound from lbd0, the one on lo left alone", func() error {
			if vips := vipsOn(t, dir); slices.Contains(vips, drain.Addr().String()+"/32") || !loHas() {
				return fmt.Errorf("lbd0 has %v; lo has %s: %v", vips, onLo, loHas())
			}
			return nil
		})
	})

	t.Run("ipvsadm -C and a deleted VIP are repaired", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		dir.MustExec(t, "ipvsadm", "-C")
		dir.MustExec(t, "ip", "addr", "del", topo.VIP(1).String()+"/32", "dev", topo.VIPLink)
		// The drained real server (weight 0, left the configuration) is not
		// worth restoring; everything else of lbd's is.
		lbdOwned := slices.DeleteFunc(slices.Clone(before), func(s string) bool {
			return strings.Contains(s, foreign.String()) || strings.HasSuffix(s, "-w 0")
		})
		waitIPVS(t, dir, "lbd to restore its virtual servers (not the foreign one)", lbdOwned)
		dir.MustExec(t, "ipvsadm", "-A", "-t", foreign.String(), "-s", "rr") // theirs again, for the cleanup test
		eventually(t, "the VIP back on lbd0", func() error {
			if !slices.Contains(vipsOn(t, dir), topo.VIP(1).String()+"/32") {
				return fmt.Errorf("lbd0 has %v", vipsOn(t, dir))
			}
			return nil
		})
		waitServes(t, client, topo.HTTP, rr)
	})

	t.Run("SIGKILL and restart lose no request and rewrite nothing", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		var wg sync.WaitGroup
		var answers topo.Answers
		var probeErr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers, probeErr = client.Probe(topo.HTTP, wrr, 150, requestTimeout)
		}()
		if err := l.proc.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		l.start()
		mark := len(l.proc.Output())
		eventually(t, "the restarted lbd's first sync", func() error {
			if !strings.Contains(sinceLog(l.proc, mark), "kernel already up to date") {
				return fmt.Errorf("no sync logged yet:\n%s", sinceLog(l.proc, mark))
			}
			return nil
		})
		wg.Wait()
		if probeErr != nil {
			t.Fatal(probeErr)
		}
		if errs := answers.Errors(); len(errs) > 0 {
			t.Errorf("%d of %d requests failed across the restart, first: %s", len(errs), len(answers), errs[0])
		}
		if out := sinceLog(l.proc, mark); strings.Contains(out, "sync applied") {
			t.Errorf("the restarted lbd wrote to the kernel:\n%s", out)
		}
		if after := ipvsadmSave(t, dir); !slices.Equal(before, after) {
			t.Errorf("IPVS changed across the restart:\nbefore %v\nafter  %v", before, after)
		}
	})

	t.Run("a removed UDP real server leaves no conntrack entry", func(t *testing.T) {
		rs2 := tp.RealServers[1].Addr(tp.Backend).String()
		probeOK(t, client, topo.UDP, dns, 6)
		if out := dir.MustExec(t, "conntrack", "-L", "-p", "udp", "--reply-src", rs2); !strings.Contains(out, "sport=53") {
			t.Fatalf("no conntrack entry for %s before the removal (is vs/conntrack on?):\n%s", rs2, out)
		}
		l.writeConfig(t, strings.Replace(edited, fmt.Sprintf(`protocol = "udp"
real_server = [{ address = "%s" }, { address = "%s" }]`, tp.RealServers[0].Addr(tp.Backend), rs2), fmt.Sprintf(`protocol = "udp"
real_server = [{ address = "%s" }]`, tp.RealServers[0].Addr(tp.Backend)), 1))
		eventually(t, "rs2 out of the UDP service and its conntrack entries gone", func() error {
			if strings.Contains(strings.Join(ipvsadmSave(t, dir), "\n"), fmt.Sprintf("-a -u %s -r %s:53", dns, rs2)) {
				return fmt.Errorf("still in IPVS")
			}
			if out, _ := dir.Exec("conntrack", "-L", "-p", "udp", "--reply-src", rs2); strings.Contains(out, "sport=53") {
				return fmt.Errorf("conntrack still has:\n%s", out)
			}
			return nil
		})
		if per := probeOK(t, client, topo.UDP, dns, 6).ByServer(); per["rs2"] != 0 {
			t.Errorf("UDP still reaches the removed real server: %v", per)
		}
	})

	t.Run("stopping lbd leaves the dataplane in place", func(t *testing.T) {
		before, vips := ipvsadmSave(t, dir), vipsOn(t, dir)
		l.proc.Stop() // SIGTERM
		if after := ipvsadmSave(t, dir); !slices.Equal(before, after) || !slices.Equal(vips, vipsOn(t, dir)) {
			t.Errorf("stopping lbd changed the kernel:\nIPVS %v -> %v\nVIPs %v -> %v", before, after, vips, vipsOn(t, dir))
		}
		waitServes(t, client, topo.HTTP, wrr)
	})

	t.Run("lbd plan --diff shows what a sync would change and changes nothing", func(t *testing.T) {
		before := ipvsadmSave(t, dir)
		l.writeConfig(t, dataplaneConfig(tp, "")) // back to weight 3 for wrr
		out := dir.MustExec(t, l.bin, "plan", "--diff", "--state-dir", l.stateDir, l.cfgPath)
		t.Logf("lbd plan --diff:\n%s", out)
		rs1 := netip.AddrPortFrom(tp.RealServers[0].Addr(tp.Backend), 80)
		for _, want := range []string{
			fmt.Sprintf("~ -e -t %s -r %s -m -w 3", wrr, rs1),
			fmt.Sprintf("- -D -t %s", netip.AddrPortFrom(topo.VIP(5), 8080)),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("plan --diff lacks %q", want)
			}
		}
		if strings.Contains(out, foreign.String()) {
			t.Errorf("plan --diff would touch the foreign virtual server")
		}
		if after := ipvsadmSave(t, dir); !slices.Equal(before, after) {
			t.Errorf("plan --diff changed IPVS")
		}
	})

	t.Run("lbd cleanup removes lbd's objects and nothing else", func(t *testing.T) {
		out := dir.MustExec(t, l.bin, "cleanup", "-c", l.cfgPath, "--state-dir", l.stateDir)
		t.Logf("lbd cleanup:\n%s", out)
		if got, want := ipvsadmSave(t, dir), []string{"-A -t " + foreign.String() + " -s rr"}; !slices.Equal(got, want) {
			t.Errorf("after cleanup ipvsadm -Sn = %v; want only %v", got, want)
		}
		if _, err := dir.Exec("ip", "link", "show", topo.VIPLink); err == nil {
			t.Errorf("%s still exists after cleanup", topo.VIPLink)
		}
		// A sync would now create the link again: the diff says so.
		out = dir.MustExec(t, l.bin, "plan", "--diff", "--state-dir", l.stateDir, l.cfgPath)
		if want := "+ ip link add " + topo.VIPLink + " type dummy"; !strings.Contains(out, want) {
			t.Errorf("plan --diff after cleanup lacks %q:\n%s", want, out)
		}
	})
}
