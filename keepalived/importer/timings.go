package importer

import (
	"time"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// timings writes a mapped check: type, interval, timeout, rise, fall,
// initial_state and port, then its type's keys.
//
// keepalived (check_tcp.c tcp_epilog and its kin) marks a real server
// down when a check fails with no retry left: after retry+1 failures in a
// row, so fall = retry+1; and up after one success, so rise = 1.
func (im *importer) timings(c *chk, s *svc, r *real, n *conf.Node) table {
	interval := defaultDelayLoop
	if c.t.delayLoop != nil {
		interval = *c.t.delayLoop
	}
	timeout := defaultConnectTimeout
	if c.t.connectTimeout != nil {
		timeout = *c.t.connectTimeout
	}
	if c.typ == "exec" {
		timeout = interval
		if c.miscTimeout != nil {
			timeout = *c.miscTimeout
		}
	}
	interval, timeout = im.clampTimes(n, interval, timeout)
	retry, ok := defaultRetry[n.Keyword]
	if !ok {
		retry = 1
	}
	if c.t.retry != nil {
		retry = *c.t.retry
	}
	fall := retry + 1
	if fall > maxFall {
		im.rep.differs(n, "lbd's fall is at most %d: written as %d (keepalived: %d failures)", maxFall, maxFall, fall)
		fall = maxFall
	}
	var t table
	t.str("type", c.typ)
	t.set("interval", tomlDuration(interval))
	t.set("timeout", tomlDuration(timeout))
	t.num("rise", 1)
	t.num("fall", int64(fall))
	alpha := s.alpha
	if r.alpha != nil {
		alpha = *r.alpha
	}
	state := "healthy"
	if alpha {
		state = "unhealthy"
	}
	t.str("initial_state", state)
	port := c.port
	if port == 0 && (s.ep.fwmark != 0 || s.fwd.method != "nat" && r.port != s.ep.port) {
		port = r.port
	}
	if port == 0 && s.ep.fwmark != 0 && c.typ != "exec" {
		im.rep.notMapped(n, "a firewall-mark service's real server has no port, and lbd's %s check needs one (connect_port): the real server is not checked", c.typ)
		return table{{"type", tomlString("none")}}
	}
	if port != 0 {
		t.num("port", int64(port))
	}
	return append(t, c.keys...)
}

// clampTimes fits interval and timeout to lbd's bounds: 10ms–1h, and a
// timeout no longer than the interval.
func (im *importer) clampTimes(n *conf.Node, interval, timeout time.Duration) (time.Duration, time.Duration) {
	if interval > maxCheckDuration {
		im.rep.differs(n, "lbd checks at least every hour: the interval %s is written as 1h", interval)
		interval = maxCheckDuration
	}
	if interval < 10*time.Millisecond {
		im.rep.differs(n, "lbd checks at most every 10ms: the interval %s is written as 10ms", interval)
		interval = 10 * time.Millisecond
	}
	if timeout > interval {
		im.rep.differs(n, "lbd's check timeout is at most its interval: the timeout %s is written as %s", timeout, interval)
		timeout = interval
	}
	if timeout < time.Millisecond {
		timeout = time.Millisecond
	}
	return interval, timeout
}
