//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	lbdconfig "github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// metric returns the sum of a metric's samples (every label set) from
// lbd's /metrics on the director's loopback.
func metric(t *testing.T, dir *topo.Director, name string) float64 {
	t.Helper()
	v, err := readMetric(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func readMetric(dir *topo.Director, name string) (float64, error) {
	out, err := dir.HTTP("GET", "http://127.0.0.1:9712/metrics", "")
	if err != nil {
		return 0, err
	}
	sum, found := 0.0, false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] != name && !strings.HasPrefix(f[0], name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %v", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("/metrics has no %s:\n%s", name, out)
	}
	return sum, nil
}

// TestOperations covers what an admin sees and does: metrics move with
// syncs, systemctl-restart-like restarts (SIGTERM, start) lose no request,
// and lbd status says clearly when the daemon is not running.
func TestOperations(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	config := func(weight int) string {
		return fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "2s"

[status]
real_server_metrics = true

[[service]]
name = "web"
vips = ["%s"]
port = 80
snat = "never"
real_server = [{ address = "%s", weight = %d }, { address = "%s" }]
`, web.Addr(), tp.RealServers[0].Addr(tp.Backend), weight, tp.RealServers[1].Addr(tp.Backend))
	}
	l := startLBD(t, dir, config(1))
	waitServes(t, client, topo.HTTP, web)

	t.Run("metrics follow the syncs", func(t *testing.T) {
		var syncs, writes float64
		// Traffic flows as soon as the kernel is written; the sync's
		// metrics follow when the sync has finished (its hooks run then).
		eventually(t, "metrics of the first sync", func() error {
			var err error
			if syncs, err = readMetric(dir, "lbd_sync_duration_seconds_count"); err != nil {
				return err
			}
			writes, err = readMetric(dir, "lbd_kernel_writes_total")
			return err
		})
		v4, v6 := filterRules(t, l.cfgPath, 4), filterRules(t, l.cfgPath, 6)
		if got := metric(t, dir, "lbd_iptables_rules"); got != v4 && got != v4+v6 {
			t.Errorf("lbd_iptables_rules = %v; want lbd's fixed rules, %v for IPv4 (and %v for IPv6)", got, v4, v6)
		}
		if got := metric(t, dir, "lbd_real_server_healthy"); got != 2 {
			t.Errorf("lbd_real_server_healthy sums to %v; want both real servers up", got)
		}
		l.writeConfig(t, config(4))
		eventually(t, "the weight change to be synced and counted", func() error {
			if got := metric(t, dir, "lbd_kernel_writes_total"); got <= writes {
				return fmt.Errorf("lbd_kernel_writes_total %v, was %v", got, writes)
			}
			if got := metric(t, dir, "lbd_sync_duration_seconds_count"); got <= syncs {
				return fmt.Errorf("lbd_sync_duration_seconds_count %v, was %v", got, syncs)
			}
			if got := metric(t, dir, "lbd_network_programming_latency_seconds_count"); got < 1 {
				return fmt.Errorf("no network-programming latency observed")
			}
			return nil
		})
		// The kernel (6.1) folds its per-CPU counters into what netlink
		// reports in its 2 s estimator: a scrape right after the traffic
		// may still read 0.
		eventually(t, "the virtual server's connections counted", func() error {
			if got := metric(t, dir, "lbd_ipvs_connections_total"); got < 1 {
				return fmt.Errorf("lbd_ipvs_connections_total = %v after traffic through the VIP", got)
			}
			return nil
		})
		eventually(t, "per-real-server connections after a full reconcile", func() error {
			got, err := readMetric(dir, "lbd_ipvs_real_server_connections")
			if err == nil && got < 1 {
				err = fmt.Errorf("lbd_ipvs_real_server_connections sums to %v after traffic", got)
			}
			return err
		})
		if got := metric(t, dir, "lbd_config_loads_total"); got < 2 {
			t.Errorf("lbd_config_loads_total = %v; want the start and the edit", got)
		}
	})

	t.Run("restarts lose no request", func(t *testing.T) {
		// Probe in batches until the restarts are over, so that traffic
		// spans every one of them.
		var wg sync.WaitGroup
		var answers topo.Answers
		var probeErr error
		done := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				as, err := client.Probe(topo.HTTP, web, 20, requestTimeout)
				if err != nil {
					probeErr = err
					return
				}
				answers = append(answers, as...)
			}
		})
		for range 3 {
			l.proc.Stop() // SIGTERM, as systemctl stop does
			l.start()
			eventually(t, "the restarted lbd to answer status", func() error {
				_, err := dir.Exec(l.bin, "status", "--socket", l.socket())
				return err
			})
		}
		close(done)
		wg.Wait()
		if probeErr != nil {
			t.Fatal(probeErr)
		}
		if errs := answers.Errors(); len(errs) > 0 {
			t.Errorf("%d of %d requests failed across 3 restarts, first: %s", len(errs), len(answers), errs[0])
		}
		t.Logf("%d requests across 3 restarts, none failed", len(answers))

		// Those connections show in lbd status, read from the kernel.
		var st struct {
			Services []struct {
				RealServers []struct {
					ActiveConns   *int `json:"active_conns"`
					InactiveConns *int `json:"inactive_conns"`
				} `json:"real_servers"`
			} `json:"services"`
		}
		out := dir.MustExec(t, l.bin, "status", "-o", "json", "--socket", l.socket())
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("lbd status -o json: %v\n%s", err, out)
		}
		conns := 0
		for _, s := range st.Services {
			for _, r := range s.RealServers {
				if r.ActiveConns == nil || r.InactiveConns == nil {
					t.Errorf("lbd status -o json lacks connection counts:\n%s", out)
					return
				}
				conns += *r.ActiveConns + *r.InactiveConns
			}
		}
		if conns == 0 {
			t.Errorf("lbd status shows no connection after %d requests:\n%s", len(answers), out)
		}
	})

	t.Run("status says when lbd is not running", func(t *testing.T) {
		l.proc.Stop()
		out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out+err.Error(), "not running") {
			t.Errorf("lbd status with the daemon stopped: exit %v, output %q; want exit 3 and 'not running'", err, out)
		}
		waitServes(t, client, topo.HTTP, web)
	})
}

// filterRules counts the rules and jumps lbd writes for a family with the
// configuration at path, as lbd plan and the metric count them.
func filterRules(t *testing.T, path string, family int) float64 {
	t.Helper()
	cfg, err := lbdconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tb := range desired.TablesFor(cfg, family) {
		n += len(tb.Rules) + len(tb.Jumps)
	}
	return float64(n)
}
