package metrics

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/runner"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/lvs"
)

func TestObserveSync(t *testing.T) {
	m := New()
	m.ObserveSync(dataplane.SyncResult{Reason: runner.Requested, Start: time.Unix(100, 0), Duration: 2 * time.Millisecond, Writes: 3, Dumps: 0, Services: 4,
		Programming: 30 * time.Millisecond, FilterRules: 46, SetEntries: 12})
	m.ObserveSync(dataplane.SyncResult{Reason: runner.Periodic, Start: time.Unix(130, 0), Duration: 40 * time.Millisecond, Writes: 0, Dumps: 3, Services: 4, Err: errors.New("x")})
	m.ObserveSync(dataplane.SyncResult{Waiting: true})
	err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP lbd_kernel_writes_total Kernel writes made by syncs.
# TYPE lbd_kernel_writes_total counter
lbd_kernel_writes_total 3
# HELP lbd_kernel_dumps_total Kernel state dumps made by syncs.
# TYPE lbd_kernel_dumps_total counter
lbd_kernel_dumps_total 3
# HELP lbd_sync_errors_total Syncs that failed (and were retried).
# TYPE lbd_sync_errors_total counter
lbd_sync_errors_total 1
# HELP lbd_sync_last_timestamp_seconds When the last sync ran (Unix time).
# TYPE lbd_sync_last_timestamp_seconds gauge
lbd_sync_last_timestamp_seconds 130
# HELP lbd_virtual_servers IPVS virtual servers in the desired state.
# TYPE lbd_virtual_servers gauge
lbd_virtual_servers 4
`), "lbd_kernel_writes_total", "lbd_kernel_dumps_total", "lbd_sync_errors_total", "lbd_sync_last_timestamp_seconds", "lbd_virtual_servers")
	if err != nil {
		t.Error(err)
	}
	err = testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP lbd_iptables_rules iptables rules lbd owns (both families); a fixed set that does not grow with services.
# TYPE lbd_iptables_rules gauge
lbd_iptables_rules 46
# HELP lbd_ipset_entries Entries in lbd's ipsets (both families).
# TYPE lbd_ipset_entries gauge
lbd_ipset_entries 12
`), "lbd_iptables_rules", "lbd_ipset_entries")
	if err != nil {
		t.Error(err)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "lbd_network_programming_latency_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.03 {
				t.Errorf("programming latency: %d samples, sum %v; want the one sync that wrote (30ms)", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
	if n := testutil.CollectAndCount(m.syncDuration); n != 2 {
		t.Errorf("sync duration series: %d; want one per reason seen (2)", n)
	}
}

func TestHealthMetrics(t *testing.T) {
	m := New()
	m.ObserveCheck(config.CheckHTTP, 3*time.Millisecond, nil)
	m.ObserveCheck(config.CheckHTTP, time.Second, errors.New("timeout"))
	m.SetHealth(map[lvs.HealthKey]bool{{Service: "web", Addr: netip.MustParseAddrPort("10.0.0.1:80")}: false})
	err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP lbd_health_check_failures_total Health checks that failed, by check type.
# TYPE lbd_health_check_failures_total counter
lbd_health_check_failures_total{type="http"} 1
# HELP lbd_real_server_healthy 1 when a real server of a service passes its checks, 0 when it does not.
# TYPE lbd_real_server_healthy gauge
lbd_real_server_healthy{real_server="10.0.0.1:80",service="web"} 0
`), "lbd_health_check_failures_total", "lbd_real_server_healthy")
	if err != nil {
		t.Error(err)
	}
	// A new map replaces the series: the real server gone, another up.
	m.SetHealth(map[lvs.HealthKey]bool{{Service: "web", Addr: netip.MustParseAddrPort("10.0.0.2:80")}: true})
	err = testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP lbd_real_server_healthy 1 when a real server of a service passes its checks, 0 when it does not.
# TYPE lbd_real_server_healthy gauge
lbd_real_server_healthy{real_server="10.0.0.2:80",service="web"} 1
`), "lbd_real_server_healthy")
	if err != nil {
		t.Error(err)
	}
}

func TestConsulMetrics(t *testing.T) {
	m := New()
	st := ConsulState{Connected: true, LastContact: time.Unix(200, 0), Requests: 10, Errors: 1, Problems: 2}
	m.WatchConsul(func() ConsulState { return st })
	want := `
# HELP lbd_consul_connected 1 while Consul answers, 0 while it is unreachable (what came from it stays as last known).
# TYPE lbd_consul_connected gauge
lbd_consul_connected %d
# HELP lbd_consul_request_errors_total Requests to Consul that failed.
# TYPE lbd_consul_request_errors_total counter
lbd_consul_request_errors_total %d
# HELP lbd_consul_refused_registrations Consul registrations or instances lbd refused (see lbd status).
# TYPE lbd_consul_refused_registrations gauge
lbd_consul_refused_registrations 2
`
	names := []string{"lbd_consul_connected", "lbd_consul_request_errors_total", "lbd_consul_refused_registrations"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(fmt.Sprintf(want, 1, 1)), names...); err != nil {
		t.Error(err)
	}
	// Read at each scrape: Consul going away shows at once.
	st.Connected, st.Errors = false, 4
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(fmt.Sprintf(want, 0, 4)), names...); err != nil {
		t.Error(err)
	}
}

func TestIPVSMetrics(t *testing.T) {
	m := New()
	web := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	other := lvs.Key{Addr: netip.MustParseAddr("192.0.2.99"), Port: 80, Protocol: lvs.TCP}
	var readErr error
	var reads atomic.Int32
	now := time.Unix(1000, 0)
	m.watchIPVS(func() (map[lvs.Key]ipvs.Counters, error) {
		reads.Add(1)
		return map[lvs.Key]ipvs.Counters{web: {Connections: 7, PacketsIn: 70, PacketsOut: 60, BytesIn: 7000, BytesOut: 90000}, other: {Connections: 1}}, readErr
	}, func() map[lvs.Key]string { return map[lvs.Key]string{web: "web"} }, func() time.Time { return now })
	want := `
# HELP lbd_ipvs_connections_total Connections IPVS scheduled for the virtual server.
# TYPE lbd_ipvs_connections_total counter
lbd_ipvs_connections_total{service="web",virtual_server="192.0.2.10:80/tcp"} 7
# HELP lbd_ipvs_bytes_out_total Bytes from the real servers back to clients.
# TYPE lbd_ipvs_bytes_out_total counter
lbd_ipvs_bytes_out_total{service="web",virtual_server="192.0.2.10:80/tcp"} 90000
# HELP lbd_ipvs_stats_read_errors 1 when the last read of the IPVS counters failed.
# TYPE lbd_ipvs_stats_read_errors gauge
lbd_ipvs_stats_read_errors 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "lbd_ipvs_connections_total", "lbd_ipvs_bytes_out_total", "lbd_ipvs_stats_read_errors"); err != nil {
		t.Error(err)
	}
	// Scrapes, even many at once, within statsMaxAge share one read.
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() { _, _ = m.Registry().Gather() })
	}
	wg.Wait()
	if got := reads.Load(); got != 1 {
		t.Errorf("51 scrapes within %v read the kernel %d times; want 1", statsMaxAge, got)
	}
	readErr = errors.New("netlink: no such file")
	now = now.Add(statsMaxAge)
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(`
# HELP lbd_ipvs_stats_read_errors 1 when the last read of the IPVS counters failed.
# TYPE lbd_ipvs_stats_read_errors gauge
lbd_ipvs_stats_read_errors 1
`), "lbd_ipvs_connections_total", "lbd_ipvs_stats_read_errors"); err != nil {
		t.Error(err)
	}
}

func TestRealServerMetrics(t *testing.T) {
	m := New()
	web := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	sig := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 2905, Protocol: lvs.SCTP} // associations count as connections
	rs := netip.MustParseAddrPort("10.0.0.1:8080")
	m.WatchRealServers(func() map[lvs.Key]map[netip.AddrPort]ipvs.Conns {
		return map[lvs.Key]map[netip.AddrPort]ipvs.Conns{web: {rs: {Active: 3, Inactive: 9}}, sig: {netip.MustParseAddrPort("10.0.0.1:2905"): {Active: 2}}}
	}, func() map[lvs.Key]string { return map[lvs.Key]string{web: "web", sig: "sig"} })
	want := `
# HELP lbd_ipvs_real_server_connections A real server's connections in the kernel by state (active, inactive), as of the last full reconcile.
# TYPE lbd_ipvs_real_server_connections gauge
lbd_ipvs_real_server_connections{real_server="10.0.0.1:8080",service="web",state="active",virtual_server="192.0.2.10:80/tcp"} 3
lbd_ipvs_real_server_connections{real_server="10.0.0.1:8080",service="web",state="inactive",virtual_server="192.0.2.10:80/tcp"} 9
lbd_ipvs_real_server_connections{real_server="10.0.0.1:2905",service="sig",state="active",virtual_server="192.0.2.10:2905/sctp"} 2
lbd_ipvs_real_server_connections{real_server="10.0.0.1:2905",service="sig",state="inactive",virtual_server="192.0.2.10:2905/sctp"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "lbd_ipvs_real_server_connections"); err != nil {
		t.Error(err)
	}
}

func TestVRRPMetrics(t *testing.T) {
	m := New()
	st := []vrrp.Status{{Name: "outside", State: vrrp.Master, Stats: vrrp.Stats{Sent: 50, Received: 2, Transitions: 2,
		Refused: map[vrrp.Refusal]uint64{vrrp.RefusedPeer: 3, vrrp.RefusedSelf: 9}}}}
	m.WatchVRRP(func() []vrrp.Status { return st })
	want := `
# HELP lbd_vrrp_master 1 while this box is the instance's master.
# TYPE lbd_vrrp_master gauge
lbd_vrrp_master{instance="outside"} 1
# HELP lbd_vrrp_state 1 for the instance's current state (INIT, BACKUP, MASTER, FAULT), 0 for the others.
# TYPE lbd_vrrp_state gauge
lbd_vrrp_state{instance="outside",state="BACKUP"} 0
lbd_vrrp_state{instance="outside",state="FAULT"} 0
lbd_vrrp_state{instance="outside",state="INIT"} 0
lbd_vrrp_state{instance="outside",state="MASTER"} 1
# HELP lbd_vrrp_adverts_sent_total VRRP advertisements sent.
# TYPE lbd_vrrp_adverts_sent_total counter
lbd_vrrp_adverts_sent_total{instance="outside"} 50
# HELP lbd_vrrp_adverts_refused_total VRRP advertisements for the instance's router that it refused, by reason (version, authentication, interval, addresses, peer).
# TYPE lbd_vrrp_adverts_refused_total counter
lbd_vrrp_adverts_refused_total{instance="outside",reason="peer"} 3
# HELP lbd_vrrp_transitions_total State changes of the instance.
# TYPE lbd_vrrp_transitions_total counter
lbd_vrrp_transitions_total{instance="outside"} 2
`
	names := []string{"lbd_vrrp_master", "lbd_vrrp_state", "lbd_vrrp_adverts_sent_total", "lbd_vrrp_adverts_refused_total", "lbd_vrrp_transitions_total"}
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}
