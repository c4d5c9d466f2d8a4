package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbdproject/lbd/ha/vrrp"
)

// vrrpCollector serves the VRRP instances' state, read at each scrape.
type vrrpCollector struct {
	status                                      func() []vrrp.Status
	state, transitions, sent, received, refused *prometheus.Desc
	sendErrors, master                          *prometheus.Desc
}

// WatchVRRP serves the failover instances' role and advert counters.
func (m *Metrics) WatchVRRP(status func() []vrrp.Status) {
	l := []string{"instance"}
	m.reg.MustRegister(&vrrpCollector{
		status: status,
		state: prometheus.NewDesc("lbd_vrrp_state",
			"1 for the instance's current state (INIT, BACKUP, MASTER, FAULT), 0 for the others.", []string{"instance", "state"}, nil),
		master:      prometheus.NewDesc("lbd_vrrp_master", "1 while this box is the instance's master.", l, nil),
		transitions: prometheus.NewDesc("lbd_vrrp_transitions_total", "State changes of the instance.", l, nil),
		sent:        prometheus.NewDesc("lbd_vrrp_adverts_sent_total", "VRRP advertisements sent.", l, nil),
		sendErrors:  prometheus.NewDesc("lbd_vrrp_advert_send_errors_total", "VRRP advertisements that could not be sent.", l, nil),
		received:    prometheus.NewDesc("lbd_vrrp_adverts_received_total", "VRRP advertisements taken from peers.", l, nil),
		refused: prometheus.NewDesc("lbd_vrrp_adverts_refused_total",
			"VRRP advertisements for the instance's router that it refused, by reason (version, authentication, interval, addresses, peer).",
			[]string{"instance", "reason"}, nil),
	})
}

func (c *vrrpCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.master, c.transitions, c.sent, c.sendErrors, c.received, c.refused} {
		ch <- d
	}
}

func (c *vrrpCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.status() {
		for _, st := range []vrrp.State{vrrp.Init, vrrp.Backup, vrrp.Master, vrrp.Fault} {
			ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, boolFloat(s.State == st), s.Name, st.String())
		}
		ch <- prometheus.MustNewConstMetric(c.master, prometheus.GaugeValue, boolFloat(s.State == vrrp.Master), s.Name)
		for _, v := range []struct {
			d *prometheus.Desc
			n uint64
		}{{c.transitions, s.Transitions}, {c.sent, s.Sent}, {c.sendErrors, s.SendErrors}, {c.received, s.Received}} {
			ch <- prometheus.MustNewConstMetric(v.d, prometheus.CounterValue, float64(v.n), s.Name)
		}
		for reason, n := range s.Refused {
			if reason == vrrp.RefusedSelf {
				continue // own adverts looped back: not a peer's
			}
			ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(n), s.Name, reason.String())
		}
	}
}
