// Package metrics exposes lbd's Prometheus metrics. Each subsystem reports
// into it through a small method; adding a metric is one field and one
// line where the event happens.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// Metrics holds lbd's registry and its metrics.
type Metrics struct {
	reg *prometheus.Registry

	syncDuration *prometheus.HistogramVec
	syncLast     prometheus.Gauge
	syncWrites   prometheus.Histogram
	kernelWrites prometheus.Counter
	kernelDumps  prometheus.Counter
	syncErrors   prometheus.Counter
	syncHeld     prometheus.Counter
	services     prometheus.Gauge
	draining     prometheus.Gauge
	syncDaemons  prometheus.Gauge
	forwarding   *prometheus.GaugeVec
	offLink      prometheus.Gauge
	configLoads  *prometheus.CounterVec
	configLast   *prometheus.GaugeVec
	checkTime    *prometheus.HistogramVec
	checkFails   *prometheus.CounterVec
	realUp       *healthCollector
	programming  prometheus.Histogram
	filterRules  prometheus.Gauge
	setEntries   prometheus.Gauge
}

// New returns the metrics in a registry of their own, with the Go runtime
// and process collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.registerSync()
	m.registerConfig()
	m.registerHealth()
	m.registerKernel()
	return m
}

// registerSync adds the metrics of the syncs and of the state they apply.
func (m *Metrics) registerSync() {
	m.syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lbd_sync_duration_seconds",
		Help:    "Time one sync of the kernel state took, by why it ran (initial, requested, periodic, retry, drift).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16), // 0.5 ms .. 16 s
	}, []string{"reason"})
	m.syncLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_sync_last_timestamp_seconds",
		Help: "When the last sync ran (Unix time).",
	})
	m.syncWrites = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lbd_sync_kernel_writes",
		Help:    "Kernel writes per sync.",
		Buckets: []float64{0, 1, 3, 10, 30, 100, 1000, 10000, 100000},
	})
	m.kernelWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lbd_kernel_writes_total",
		Help: "Kernel writes made by syncs.",
	})
	m.kernelDumps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lbd_kernel_dumps_total",
		Help: "Kernel state dumps made by syncs.",
	})
	m.syncErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lbd_sync_errors_total",
		Help: "Syncs that failed (and were retried).",
	})
	m.syncHeld = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "lbd_sync_held_total",
		Help: "Syncs whose deletions the safety valve held back (their other changes were applied).",
	})
	m.services = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_virtual_servers",
		Help: "IPVS virtual servers in the desired state.",
	})
	m.draining = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_real_servers_draining",
		Help: "Real servers kept at weight 0 until their connections end.",
	})
	m.syncDaemons = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_ipvs_sync_daemons",
		Help: "IPVS connection-sync daemons running as [ha.ipvs_sync] asks (2 with it: master and backup); 0 when the last sync could not start them.",
	})
	m.reg.MustRegister(m.syncDuration, m.syncLast, m.syncWrites, m.kernelWrites, m.kernelDumps,
		m.syncErrors, m.syncHeld, m.services, m.draining, m.syncDaemons)
	m.registerForwarding()
}

// registerForwarding adds the metrics of the forwarding methods: counts by
// method, a few series whatever the number of real servers (the method of
// each one is in lbd status).
func (m *Metrics) registerForwarding() {
	m.forwarding = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lbd_real_servers",
		Help: "IPVS destinations in the applied state (one per real server and virtual server), by forwarding method: nat, dr, tun.",
	}, []string{"forward"})
	m.offLink = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_real_servers_off_link",
		Help: "Direct-routing real servers that no connected route of the director covers: packets cannot reach them (see lbd status); kept in service.",
	})
	m.reg.MustRegister(m.forwarding, m.offLink)
}

// registerConfig adds the metrics of configuration loads.
func (m *Metrics) registerConfig() {
	m.configLoads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lbd_config_loads_total",
		Help: "Configuration loads, by result (applied, rejected).",
	}, []string{"result"})
	m.configLast = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lbd_config_last_load_timestamp_seconds",
		Help: "When the configuration was last loaded (Unix time), by result.",
	}, []string{"result"})
	m.reg.MustRegister(m.configLoads, m.configLast)
}

// registerHealth adds the metrics of health checks and their results.
func (m *Metrics) registerHealth() {
	m.checkTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lbd_health_check_duration_seconds",
		Help:    "Time one health check took, by check type.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9), // 0.1 ms .. 6.5 s
	}, []string{"type"})
	m.checkFails = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lbd_health_check_failures_total",
		Help: "Health checks that failed, by check type.",
	}, []string{"type"})
	m.realUp = &healthCollector{desc: prometheus.NewDesc("lbd_real_server_healthy",
		"1 when a real server of a service passes its checks, 0 when it does not.",
		[]string{"service", "real_server"}, nil)}
	m.reg.MustRegister(m.checkTime, m.checkFails, m.realUp)
}

// registerKernel adds the metrics of the kernel state: how soon it follows
// a change, what lbd keeps in it, and the conntrack table.
func (m *Metrics) registerKernel() {
	m.programming = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "lbd_network_programming_latency_seconds",
		Help:    "From an input change (configuration, Consul, health, host addresses) to the kernel written by the sync that took it.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	})
	m.filterRules = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_iptables_rules",
		Help: "iptables rules lbd owns (both families); a fixed set that does not grow with services.",
	})
	m.setEntries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lbd_ipset_entries",
		Help: "Entries in lbd's ipsets (both families).",
	})
	m.reg.MustRegister(m.programming, m.filterRules, m.setEntries,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lbd_conntrack_entries", Help: "Connections the kernel tracks (nf_conntrack_count)."},
			func() float64 { return readProcNumber(procSys + "net/netfilter/nf_conntrack_count") }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lbd_conntrack_entries_max", Help: "Size of the conntrack table (nf_conntrack_max)."},
			func() float64 { return readProcNumber(procSys + "net/netfilter/nf_conntrack_max") }),
	)
}

// Registry returns the registry, for tests and for other packages'
// collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveSync records one sync.
func (m *Metrics) ObserveSync(r dataplane.SyncResult) {
	if r.Waiting {
		return
	}
	m.syncDuration.WithLabelValues(r.Reason.String()).Observe(r.Duration.Seconds())
	m.syncLast.Set(float64(r.Start.UnixNano()) / 1e9)
	m.syncWrites.Observe(float64(r.Writes))
	m.kernelWrites.Add(float64(r.Writes))
	m.kernelDumps.Add(float64(r.Dumps))
	m.services.Set(float64(r.Services))
	if r.Programming > 0 {
		m.programming.Observe(r.Programming.Seconds())
	}
	if r.Err == nil {
		m.filterRules.Set(float64(r.FilterRules))
		m.setEntries.Set(float64(r.SetEntries))
	}
	m.draining.Set(float64(r.Draining))
	m.syncDaemons.Set(float64(r.SyncDaemons))
	if r.SyncDaemonsErr != nil {
		m.syncDaemons.Set(0)
	}
	if r.Err != nil {
		m.syncErrors.Inc()
	}
	if r.Held.Active() {
		m.syncHeld.Inc()
	}
}

// ObserveForwarding counts the destinations of the applied state's
// services by forwarding method; every method has its series, 0 or not.
func (m *Metrics) ObserveForwarding(services []desired.Service) {
	var n [3]int // by lvs.Method: NAT, DR, Tunnel
	for _, s := range services {
		if s.Method == lvs.NAT { // a NAT service's destinations are all NAT
			n[lvs.NAT] += len(s.Dests)
			continue
		}
		for _, d := range s.Dests {
			if f := d.Forward().Method; int(f) < len(n) {
				n[f]++
			}
		}
	}
	for _, l := range []struct {
		method lvs.Method
		label  string
	}{{lvs.NAT, "nat"}, {lvs.DR, "dr"}, {lvs.Tunnel, "tun"}} {
		m.forwarding.WithLabelValues(l.label).Set(float64(n[l.method]))
	}
}

// SetRealServersOffLink sets how many direct-routing real servers are on
// no link of the director.
func (m *Metrics) SetRealServersOffLink(n int) { m.offLink.Set(float64(n)) }

// ObserveCheck records one health check.
func (m *Metrics) ObserveCheck(typ config.CheckType, took time.Duration, err error) {
	m.checkTime.WithLabelValues(string(typ)).Observe(took.Seconds())
	if err != nil {
		m.checkFails.WithLabelValues(string(typ)).Inc()
	}
}

// SetHealth replaces the per-real-server health series with h, which the
// caller no longer modifies. The series are made from it when scraped: a
// health change costs nothing here, and 100,000 checked real servers are
// not kept a second time as stored series.
func (m *Metrics) SetHealth(h map[lvs.HealthKey]bool) {
	m.realUp.mu.Lock()
	m.realUp.health = h
	m.realUp.mu.Unlock()
}

// healthCollector makes lbd_real_server_healthy from the latest health map.
type healthCollector struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	health map[lvs.HealthKey]bool
}

func (c *healthCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *healthCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	h := c.health
	c.mu.Unlock()
	for k, up := range h {
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, k.Service, k.Addr.String())
	}
}

// ObserveConfigLoad records a configuration load.
func (m *Metrics) ObserveConfigLoad(applied bool, at time.Time) {
	result := "applied"
	if !applied {
		result = "rejected"
	}
	m.configLoads.WithLabelValues(result).Inc()
	m.configLast.WithLabelValues(result).Set(float64(at.UnixNano()) / 1e9)
}

// Serve serves /metrics on addr until ctx ends.
func (m *Metrics) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}

// ConsulState is what the metrics show of the Consul source.
type ConsulState struct {
	Connected        bool
	LastContact      time.Time
	Requests, Errors uint64
	// Problems counts the registrations lbd refused.
	Problems int
}

// WatchConsul serves the Consul source's state, read from state at each
// scrape.
func (m *Metrics) WatchConsul(state func() ConsulState) {
	gauge := func(name, help string, f func(ConsulState) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(state()) })
	}
	counter := func(name, help string, f func(ConsulState) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(state()) })
	}
	m.reg.MustRegister(
		gauge("lbd_consul_connected", "1 while Consul answers, 0 while it is unreachable (what came from it stays as last known).",
			func(s ConsulState) float64 { return boolFloat(s.Connected) }),
		gauge("lbd_consul_last_contact_timestamp_seconds", "When Consul last answered.",
			func(s ConsulState) float64 { return unixSeconds(s.LastContact) }),
		counter("lbd_consul_requests_total", "Requests sent to Consul.",
			func(s ConsulState) float64 { return float64(s.Requests) }),
		counter("lbd_consul_request_errors_total", "Requests to Consul that failed.",
			func(s ConsulState) float64 { return float64(s.Errors) }),
		gauge("lbd_consul_refused_registrations", "Consul registrations or instances lbd refused (see lbd status).",
			func(s ConsulState) float64 { return float64(s.Problems) }),
	)
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

const procSys = "/proc/sys/"

// readProcNumber reads a number from a /proc file; NaN when it cannot
// (conntrack not loaded), which Prometheus shows as such.
func readProcNumber(path string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return math.NaN()
	}
	return v
}
