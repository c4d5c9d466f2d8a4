package metrics

import (
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// ipvsCollector serves the kernel's per-virtual-server counters of lbd's
// services, read with one dump at each scrape.
type ipvsCollector struct {
	read  func() (map[lvs.Key]ipvs.Counters, error)
	names func() map[lvs.Key]string

	conns, pktsIn, pktsOut, bytesIn, bytesOut, errors *prometheus.Desc
}

// WatchIPVS serves per-virtual-server IPVS counters: read dumps the
// kernel's counters, names maps lbd's virtual servers to their service
// (virtual servers that are not lbd's are left out).
func (m *Metrics) WatchIPVS(read func() (map[lvs.Key]ipvs.Counters, error), names func() map[lvs.Key]string) {
	labels := []string{"service", "virtual_server"}
	m.reg.MustRegister(&ipvsCollector{
		read: read, names: names,
		conns:    prometheus.NewDesc("lbd_ipvs_connections_total", "Connections IPVS scheduled for the virtual server.", labels, nil),
		pktsIn:   prometheus.NewDesc("lbd_ipvs_packets_in_total", "Packets from clients to the virtual server.", labels, nil),
		pktsOut:  prometheus.NewDesc("lbd_ipvs_packets_out_total", "Packets from the real servers back to clients.", labels, nil),
		bytesIn:  prometheus.NewDesc("lbd_ipvs_bytes_in_total", "Bytes from clients to the virtual server.", labels, nil),
		bytesOut: prometheus.NewDesc("lbd_ipvs_bytes_out_total", "Bytes from the real servers back to clients.", labels, nil),
		errors:   prometheus.NewDesc("lbd_ipvs_stats_read_errors", "1 when the last scrape could not read the IPVS counters.", nil, nil),
	})
}

func (c *ipvsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.pktsIn, c.pktsOut, c.bytesIn, c.bytesOut, c.errors} {
		ch <- d
	}
}

func (c *ipvsCollector) Collect(ch chan<- prometheus.Metric) {
	stats, err := c.read()
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
