package metrics

import (
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// ipvsCollector serves the kernel's per-virtual-server counters of lbd's
// services. A dump of every virtual server costs the kernel and lbd in
// proportion to the table, and any local user can scrape: scrapes within
// statsMaxAge of a read share it, and concurrent ones wait for one read.
type ipvsCollector struct {
	read  func() (map[lvs.Key]ipvs.Counters, error)
	names func() map[lvs.Key]string
	now   func() time.Time

	mu    sync.Mutex
	at    time.Time // of the last read; zero before the first
	stats map[lvs.Key]ipvs.Counters
	err   error

	conns, pktsIn, pktsOut, bytesIn, bytesOut, errors *prometheus.Desc
}

// statsMaxAge is how old IPVS counters a scrape may be served: shorter
// than any sensible scrape interval, and near the kernel's own 2 s rate
// estimator, so a scraper sees nothing it would not have seen anyway.
const statsMaxAge = 2 * time.Second

// WatchIPVS serves per-virtual-server IPVS counters: read dumps the
// kernel's counters, names maps lbd's virtual servers to their service
// (virtual servers that are not lbd's are left out).
func (m *Metrics) WatchIPVS(read func() (map[lvs.Key]ipvs.Counters, error), names func() map[lvs.Key]string) {
	m.watchIPVS(read, names, time.Now)
}

func (m *Metrics) watchIPVS(read func() (map[lvs.Key]ipvs.Counters, error), names func() map[lvs.Key]string, now func() time.Time) {
	labels := []string{"service", "virtual_server"}
	m.reg.MustRegister(&ipvsCollector{
		read: read, names: names, now: now,
		conns:    prometheus.NewDesc("lbd_ipvs_connections_total", "Connections IPVS scheduled for the virtual server.", labels, nil),
		pktsIn:   prometheus.NewDesc("lbd_ipvs_packets_in_total", "Packets from clients to the virtual server.", labels, nil),
		pktsOut:  prometheus.NewDesc("lbd_ipvs_packets_out_total", "Packets from the real servers back to clients.", labels, nil),
		bytesIn:  prometheus.NewDesc("lbd_ipvs_bytes_in_total", "Bytes from clients to the virtual server.", labels, nil),
		bytesOut: prometheus.NewDesc("lbd_ipvs_bytes_out_total", "Bytes from the real servers back to clients.", labels, nil),
		errors:   prometheus.NewDesc("lbd_ipvs_stats_read_errors", "1 when the last read of the IPVS counters failed.", nil, nil),
	})
}

// counters returns the last read if it is recent enough, else reads.
func (c *ipvsCollector) counters() (map[lvs.Key]ipvs.Counters, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); c.at.IsZero() || now.Sub(c.at) >= statsMaxAge {
		c.stats, c.err = c.read()
		c.at = now
	}
	return c.stats, c.err
}

func (c *ipvsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.pktsIn, c.pktsOut, c.bytesIn, c.bytesOut, c.errors} {
		ch <- d
	}
}

func (c *ipvsCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.counters()
	ch <- prometheus.MustNewConstMetric(c.errors, prometheus.GaugeValue, boolFloat(err != nil))
	if err != nil {
		return
	}
	for key, name := range c.names() {
		st, ok := stats[key]
		if !ok {
			continue
		}
		vs := key.String()
		for _, v := range []struct {
			d *prometheus.Desc
			n uint64
		}{{c.conns, st.Connections}, {c.pktsIn, st.PacketsIn}, {c.pktsOut, st.PacketsOut}, {c.bytesIn, st.BytesIn}, {c.bytesOut, st.BytesOut}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), name, vs)
		}
	}
}

// realServerCollector serves per-real-server connection counts from the
// reconciler's last full dump: no kernel read per scrape.
type realServerCollector struct {
	conns func() map[lvs.Key]map[netip.AddrPort]ipvs.Conns
	names func() map[lvs.Key]string
	desc  *prometheus.Desc
}

// WatchRealServers serves lbd_ipvs_real_server_connections (opt-in: one
// series per real server and state).
func (m *Metrics) WatchRealServers(conns func() map[lvs.Key]map[netip.AddrPort]ipvs.Conns, names func() map[lvs.Key]string) {
	m.reg.MustRegister(&realServerCollector{conns: conns, names: names,
		desc: prometheus.NewDesc("lbd_ipvs_real_server_connections",
			"A real server's connections in the kernel by state (active, inactive), as of the last full reconcile.",
			[]string{"service", "virtual_server", "real_server", "state"}, nil)})
}

func (c *realServerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *realServerCollector) Collect(ch chan<- prometheus.Metric) {
	conns := c.conns()
	for key, name := range c.names() {
		vs := key.String()
		for addr, n := range conns[key] {
			rs := addr.String()
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n.Active), name, vs, rs, "active")
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n.Inactive), name, vs, rs, "inactive")
		}
	}
}
