package dataplane_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/lvs"
)

func parse(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// start runs a Dataplane with opts (a fake address kernel unless opts
// has one) until the test ends; before, when given, is called first.
func start(t *testing.T, opts dataplane.Options, before ...func(*dataplane.Dataplane)) *dataplane.Dataplane {
	t.Helper()
	if opts.Addrs == nil {
		opts.Addrs = addrs.New(&fakeaddrs.Kernel{}, "lbd0")
	}
	dp := dataplane.New(opts)
	for _, f := range before {
		if f != nil {
			f(dp)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go dp.Loop(ctx)
	return dp
}

// sources delivers cfg as the daemon does, with an edition: every
// configuration a test parses is a new one, an edit of the admin's.
func sources(cfg *config.Config, reals map[string][]config.RealServer, services []config.Service) dataplane.Sources {
	return dataplane.Sources{Config: cfg, Edition: edition(cfg), Reals: reals, Services: services}
}

func edition(cfg *config.Config) string { return fmt.Sprintf("%p", cfg) }

// setConfig delivers cfg with nothing discovered.
func setConfig(dp *dataplane.Dataplane, cfg *config.Config) { dp.SetSources(sources(cfg, nil, nil)) }

const conf = `
[sync]
min_sync_period = "1s"
sync_period = "30s"
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1", weight = %d }, { address = "10.0.0.2" }]
`

func TestDataplaneSyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		ka := &fakeaddrs.Kernel{}
		first := parse(t, strings.Replace(conf, "%d", "3", 1))
		dp := dataplane.New(dataplane.Options{
			IPVS:  ipvs.New(kv, &fakeipvs.Ledger{}),
			Addrs: addrs.New(ka, "lbd0"),
			Sync:  first.Sync,
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go dp.Loop(ctx)

		// Nothing happens before a configuration arrives, even at sync_period.
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if _, writes := kv.Counts(); writes != 0 || !dp.Last().Waiting {
			t.Fatalf("synced before a configuration: writes %d, last %+v", writes, dp.Last())
		}

		setConfig(dp, first)
		synctest.Wait()
		want := "192.0.2.10:80/tcp wrr flags=0x0 timeout=0\n  -> 10.0.0.1:80 w=3\n  -> 10.0.0.2:80 w=1\n"
		if kv.String() != want || ka.String() != "lbd0: 192.0.2.10\n" {
			t.Fatalf("after first config:\n%s%s", kv, ka)
		}

		// A weight change: no kernel reads, one write.
		dumps := func() int { a, _ := kv.Counts(); b, _ := ka.Counts(); return a + b }
		before := dumps()
		setConfig(dp, parse(t, strings.Replace(conf, "%d", "5", 1)))
		synctest.Wait()
		last := dp.Last()
		if last.Writes != 1 || last.Dumps != 0 || dumps() != before {
			t.Errorf("weight change: %+v; want 1 write, 0 dumps", last)
		}

		// Drift is repaired by the periodic full sync.
		st, _ := dp.Desired()
		if err := kv.DeleteService(st.Services[0].Key); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		want = strings.Replace(want, "w=3", "w=5", 1)
		if last := dp.Last(); kv.String() != want || last.Reason.String() != "periodic" || last.Writes != 3 {
			t.Errorf("after drift and a sync period: %+v\n%s", last, kv)
		}
	})
}

func TestSafetyValve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
on_unhealthy = "remove"
real_server = [{ address = "10.0.0.1" }, { address = "10.0.0.2" }, { address = "10.0.0.3" }, { address = "10.0.0.4" }]
[[service]]
name = "api"
vips = ["192.0.2.20"]
port = 80
real_server = [{ address = "10.0.1.1" }]
`)
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Sync: cfg.Sync})
		setConfig(dp, cfg)
		synctest.Wait()
		before := kv.String()

		// Health (not the admin) would remove 2 of 3 real servers: held.
		down := func(addrs ...string) map[lvs.HealthKey]bool {
			m := map[lvs.HealthKey]bool{}
			for _, a := range addrs {
				m[lvs.HealthKey{Service: "web", Addr: netip.MustParseAddrPort(a)}] = false
			}
			return m
		}
		// api's real server failing at the same time is drained (weight
		// 0, no deletion): that part of the sync goes in.
		h := down("10.0.0.1:80", "10.0.0.2:80", "10.0.0.4:80")
		h[lvs.HealthKey{Service: "api", Addr: netip.MustParseAddrPort("10.0.1.1:80")}] = false
		dp.SetHealth(h)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); !strings.Contains(last.Held.String(), "would delete 3 of 5 real servers") ||
			kv.String() != strings.Replace(before, "10.0.1.1:80 w=1", "10.0.1.1:80 w=0", 1) {
			t.Errorf("mass removal not held, or the rest not applied: %+v\n%s", last, kv)
		}
		// Discovery adding real servers meanwhile does not dilute the held
		// deletions below the limit: they stay held, the additions go in.
		added := func(addr string) config.RealServer {
			ap := netip.MustParseAddrPort(addr)
			return config.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: 1, HealthCheck: &config.HealthCheck{Type: config.CheckNone}}
		}
		dp.SetSources(sources(cfg, map[string][]config.RealServer{"api": {added("10.0.1.2:80"), added("10.0.1.3:80")}}, nil))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		dp.SetHealth(maps.Clone(h)) // one more sync, now with the additions applied
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); !last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.2:80 w=1") || !strings.Contains(kv.String(), "10.0.1.3:80 w=1") {
			t.Errorf("additions released the held deletions, or were not applied: %+v\n%s", last, kv)
		}
		// One of five is within the limit.
		dp.SetHealth(down("10.0.0.1:80"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.1:80 w=0") {
			t.Errorf("a small removal was held: %+v\n%s", last, kv)
		}
		// The admin removing every real server is obeyed.
		setConfig(dp, parse(t, "[[service]]\nname = \"web\"\nvips = [\"192.0.2.10\"]\nport = 80\n"))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); last.Held.Active() || last.Draining != 4 {
			t.Errorf("an admin edit was held: %+v\n%s", last, kv)
		}
	})
}

func TestDiscovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		cfg := parse(t, `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1" }]
[service.consul]
service = "web"
`)
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Sync: cfg.Sync})
		rs := func(addr string, down bool) config.RealServer {
			ap := netip.MustParseAddrPort(addr)
			return config.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: 2, Down: down, HealthCheck: &config.HealthCheck{Type: config.CheckNone}}
		}
		api := cfg.Services[0]
		api.Name, api.VIPs, api.Port, api.RealServers = "api", []netip.Addr{netip.MustParseAddr("192.0.2.20")}, 443, []config.RealServer{rs("10.0.1.1:8443", false)}
		reals := map[string][]config.RealServer{"web": {rs("10.0.0.2:80", false), rs("10.0.0.3:80", false), rs("10.0.0.4:80", true)}}
		dp.SetSources(sources(cfg, reals, []config.Service{api}))
		synctest.Wait()
		got := kv.String()
		for _, want := range []string{"10.0.0.1:80 w=1", "10.0.0.2:80 w=2", "10.0.0.3:80 w=2", "10.0.0.4:80 w=0", "192.0.2.20:443", "10.0.1.1:8443 w=2"} {
			if !strings.Contains(got, want) {
				t.Errorf("kernel lacks %q:\n%s", want, got)
			}
		}
		if st, _ := dp.Desired(); st.Services[0].Healthy != 3 || st.Services[1].Healthy != 1 {
			t.Errorf("healthy counts: web %d, api %d; want 3 (one down) and 1", st.Services[0].Healthy, st.Services[1].Healthy)
		}
		// Discovery answering empty is not the admin's edit: held.
		dp.SetSources(sources(cfg, nil, nil))
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); !last.Held.Active() || kv.String() != got {
			t.Errorf("discovery emptying the services was applied: %+v\n%s", last, kv)
		}
		if st, ok := dp.Applied(); !ok || len(st.Services) != 2 {
			t.Errorf("Applied after a held sync: %d services, ok %v; want the 2 the kernel still holds", len(st.Services), ok)
		}
	})
}

// TestSafetyValveAfterAFailedSync: a configuration edit whose sync fails
// for one virtual server is still the configuration in force, so a later
// mass removal by health is held, not taken for the admin's edit.
func TestSafetyValveAfterAFailedSync(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		web := `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
on_unhealthy = "remove"
real_server = [{ address = "10.0.0.1" }, { address = "10.0.0.2" }, { address = "10.0.0.3" }]
`
		cfg := parse(t, web)
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Sync: cfg.Sync})
		setConfig(dp, cfg)
		synctest.Wait()

		// The admin adds a service the kernel refuses once.
		edited := parse(t, web+"[[service]]\nname = \"api\"\nvips = [\"192.0.2.20\"]\nport = 443\n")
		api := lvs.Key{Addr: netip.MustParseAddr("192.0.2.20"), Port: 443, Protocol: lvs.TCP}
		kv.Fail = map[lvs.Key]error{api: syscall.EINVAL}
		setConfig(dp, edited)
		synctest.Wait()
		if last := dp.Last(); last.Err == nil || !slices.Equal(last.Failed, []lvs.Key{api}) || !strings.Contains(kv.String(), "10.0.0.3:80 w=1") {
			t.Fatalf("refused service: %+v\n%s; want an error naming only api, web applied", last, kv)
		}
		before := kv.String()
		down := map[lvs.HealthKey]bool{}
		for _, a := range []string{"10.0.0.1:80", "10.0.0.2:80"} {
			down[lvs.HealthKey{Service: "web", Addr: netip.MustParseAddrPort(a)}] = false
		}
		dp.SetHealth(down)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if last := dp.Last(); !strings.Contains(last.Held.String(), "would delete 2 of 3 real servers") || strings.Contains(kv.String(), "w=0") {
			t.Errorf("mass removal after a failed edit not held: %+v\nbefore:\n%safter:\n%s", last, before, kv)
		}
	})
}

// failingCleaner fails its first fail calls and records what it was asked.
type failingCleaner struct {
	fail  int
	calls [][]conntrack.Flow
}

func (c *failingCleaner) DeleteReleased([]netip.Addr) (uint, error) { return 0, nil }

func (c *failingCleaner) DeleteUDP(flows []conntrack.Flow) (uint, error) {
	c.calls = append(c.calls, slices.Clone(flows))
	if len(c.calls) <= c.fail {
		return 0, errors.New("conntrack said no")
	}
	return uint(len(flows)), nil
}

// TestConntrackRetried: the destinations are gone from IPVS after the
// first sync, so a failed conntrack pass must be retried from what the
// dataplane kept, not from a diff.
func TestConntrackRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		dns := `
[[service]]
name = "dns"
vips = ["192.0.2.53"]
port = 53
protocol = "udp"
real_server = [{ address = "10.0.0.1" }%s]
`
		cfg := parse(t, strings.Replace(dns, "%s", `, { address = "10.0.0.2" }`, 1))
		ct := &failingCleaner{fail: 1}
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Conntrack: ct, Sync: cfg.Sync})
		setConfig(dp, cfg)
		synctest.Wait()
		setConfig(dp, parse(t, strings.Replace(dns, "%s", "", 1)))
		time.Sleep(10 * time.Second) // the retry's backoff
		synctest.Wait()
		want := []conntrack.Flow{{VIP: netip.MustParseAddrPort("192.0.2.53:53"), Real: netip.MustParseAddrPort("10.0.0.2:53")}}
		if len(ct.calls) != 2 || !slices.Equal(ct.calls[0], want) || !slices.Equal(ct.calls[1], want) {
			t.Fatalf("conntrack calls %v; want %v twice (failed, retried)", ct.calls, want)
		}
		if last := dp.Last(); last.Err != nil || strings.Contains(kv.String(), "10.0.0.2") {
			t.Errorf("after the retry: %+v\n%s", last, kv)
		}
		// Done: a later sync asks for nothing more.
		dp.SetHealth(map[lvs.HealthKey]bool{})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if len(ct.calls) != 2 {
			t.Errorf("conntrack asked again after success: %v", ct.calls)
		}
	})
}

// TestSafetyValveAfterRestart: lbd restarts over a kernel that holds its
// virtual servers, with the files unchanged, and discovery answers short:
// the first sync may not drain more than max_delete_fraction either. With
// a configuration the admin edited meanwhile (another one), it may.
func TestSafetyValveAfterRestart(t *testing.T) {
	cfgText := `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1" }]
[service.consul]
service = "web"
`
	web := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	rs := func(last byte) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, last}), 80)
	}
	tests := []struct {
		name     string
		baseline bool // the files are those in force before the restart
		wantHeld bool
	}{
		{"files unchanged: held", true, true},
		{"files edited while lbd was stopped: applied", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// The kernel as the previous lbd left it: four real servers,
				// three of them from Consul.
				kv := &fakeipvs.Kernel{}
				var kernel []desired.Service
				if err := kv.AddService(ipvs.Service{Key: web, Scheduler: "wrr", Netmask: 0xffffffff}); err != nil {
					t.Fatal(err)
				}
				vs := desired.Service{Key: web, Scheduler: "wrr", Netmask: 0xffffffff}
				for i := byte(1); i <= 4; i++ {
					if err := kv.AddDest(web, ipvs.Dest{Addr: rs(i), Weight: 1}); err != nil {
						t.Fatal(err)
					}
					vs.Dests = append(vs.Dests, desired.Dest{Addr: rs(i), Weight: 1})
				}
				kernel = append(kernel, vs)
				cfg := parse(t, cfgText)
				var baseline func(*dataplane.Dataplane)
				if tt.baseline {
					baseline = func(dp *dataplane.Dataplane) { dp.SetRestartBaseline(edition(cfg), kernel) }
				}
				dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{Keys: map[lvs.Key]bool{web: true}}), Sync: cfg.Sync}, baseline)
				// Consul answers with none of its three real servers.
				dp.SetSources(sources(cfg, nil, nil))
				synctest.Wait()
				last, k := dp.Last(), kv.String()
				kept := strings.Contains(k, "10.0.0.4:80 w=1")
				if held := last.Held.Active(); held != tt.wantHeld || kept != tt.wantHeld {
					t.Errorf("held %q, real servers kept %v; want held %v\n%s", last.Held, kept, tt.wantHeld, k)
				}
				if !tt.wantHeld {
					return
				}
				// An edit of another service keeps the hold; one of web releases it.
				other := parse(t, cfgText+"[[service]]\nname = \"api\"\nvips = [\"192.0.2.20\"]\nport = 80\n")
				dp.SetSources(sources(other, nil, nil))
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if last := dp.Last(); !last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.4:80 w=1") || !strings.Contains(kv.String(), "192.0.2.20:80") {
					t.Errorf("an edit of another service after the restart: %+v\n%s", last, kv)
				}
				dp.SetSources(sources(parse(t, strings.Replace(cfgText, "[service.consul]\nservice = \"web\"\n", "", 1)), nil, nil))
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if last := dp.Last(); last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.4:80 w=0") {
					t.Errorf("an edit of web after the restart: %+v\n%s", last, kv)
				}
			})
		})
	}
}

// TestRefusedServiceKeepsSyncsIncremental: a virtual server the kernel
// keeps refusing is reported by every sync, but event-driven syncs of the
// others stay diffs against the cache: no kernel read.
func TestRefusedServiceKeepsSyncsIncremental(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		text := strings.Replace(conf, "%d", "3", 1) + "[[service]]\nname = \"api\"\nvips = [\"192.0.2.20\"]\nport = 443\nscheduler = \"mh\"\nreal_server = [{ address = \"10.0.1.1\" }]\n"
		api := lvs.Key{Addr: netip.MustParseAddr("192.0.2.20"), Port: 443, Protocol: lvs.TCP}
		cfg := parse(t, text)
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Sync: cfg.Sync})
		// No ip_vs_mh: the kernel answers every add of api with ENOENT.
		kv.Fail = map[lvs.Key]error{api: syscall.ENOENT}
		setConfig(dp, cfg)
		synctest.Wait()
		if last := dp.Last(); !errors.Is(last.Err, syscall.ENOENT) || !strings.Contains(kv.String(), "10.0.0.1:80 w=3") {
			t.Fatalf("first sync: %+v\n%s", last, kv)
		}
		kv.Fail = map[lvs.Key]error{api: syscall.ENOENT}
		dumps := func() int { n, _ := kv.Counts(); return n }
		before := dumps()
		setConfig(dp, parse(t, strings.Replace(text, "weight = 3", "weight = 5", 1)))
		synctest.Wait()
		last := dp.Last()
		if last.Reason.String() != "requested" || last.Dumps != 0 || dumps() != before || !slices.Equal(last.Failed, []lvs.Key{api}) ||
			!strings.Contains(kv.String(), "10.0.0.1:80 w=5") {
			t.Errorf("weight change beside a refused service: %+v, %d IPVS dumps\n%s; want a requested sync with no dump that sets w=5",
				last, dumps()-before, kv)
		}
	})
}

// TestSafetyValveThroughAnUnrelatedEdit: while Consul's mass removal is
// held, an admin's edit of another service goes in and the removal stays
// held; an edit of the service itself is the admin's to make.
func TestSafetyValveThroughAnUnrelatedEdit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		kv := &fakeipvs.Kernel{}
		text := `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1" }]
[service.consul]
service = "web"
[[service]]
name = "api"
vips = ["192.0.2.20"]
port = 80
real_server = [{ address = "10.0.1.1", weight = 2 }]
`
		cfg := parse(t, text)
		consul := func(lasts ...byte) map[string][]config.RealServer {
			var rs []config.RealServer
			for _, l := range lasts {
				rs = append(rs, config.RealServer{Address: netip.AddrFrom4([4]byte{10, 0, 0, l}), Port: 80, Weight: 1,
					HealthCheck: &config.HealthCheck{Type: config.CheckNone}, Pos: config.Pos{File: "consul"}})
			}
			return map[string][]config.RealServer{"web": rs}
		}
		dp := start(t, dataplane.Options{IPVS: ipvs.New(kv, &fakeipvs.Ledger{}), Sync: cfg.Sync})
		step := func(cfg *config.Config, reals map[string][]config.RealServer) dataplane.SyncResult {
			dp.SetSources(sources(cfg, reals, nil))
			time.Sleep(2 * time.Second)
			synctest.Wait()
			return dp.Last()
		}
		step(cfg, consul(2, 3, 4, 5))
		// Consul answers empty: 4 of 6 real servers. Held.
		if last := step(cfg, nil); !last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.5:80 w=1") {
			t.Fatalf("mass removal not held: %+v\n%s", last, kv)
		}
		// The admin edits api: that goes in, Consul's removal stays held.
		edited := parse(t, strings.Replace(text, "weight = 2", "weight = 3", 1))
		if last := step(edited, nil); !last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.5:80 w=1") || !strings.Contains(kv.String(), "10.0.1.1:80 w=3") {
			t.Errorf("an unrelated edit: %+v\n%s; want api at w=3 and web's Consul real servers kept", last, kv)
		}
		// The admin stops following Consul for web: its edit, obeyed.
		noConsul := parse(t, strings.Replace(strings.Replace(text, "weight = 2", "weight = 3", 1), "[service.consul]\nservice = \"web\"\n", "", 1))
		if last := step(noConsul, nil); last.Held.Active() || !strings.Contains(kv.String(), "10.0.0.5:80 w=0") {
			t.Errorf("the admin's edit of web: %+v\n%s; want web's Consul real servers drained", last, kv)
		}
	})
}
