package importer

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// finishReals decides what depends on all the real servers: their
// methods, failure handling, quorum and checks.
func (im *importer) finishReals(s *svc) {
	im.dropReals(s)
	for _, r := range s.reals {
		if r.fwd != nil && (r.fwd.method == "nat") != (s.fwd.method == "nat") {
			im.rep.notMapped(r.n, "lbd does not mix NAT with DR or TUN in one service: this real server uses the service's method (%s)", s.fwd.method)
			r.fwd = nil
		}
		if s.fwd.method != "nat" && s.ep.fwmark == 0 && r.port != 0 && r.port != s.ep.port {
			im.rep.differs(r.n, "IPVS cannot map ports with DR or TUN: lbd writes no port (the kernel ignored %d too); the check keeps it", r.port)
		}
		if r.checkNode != nil {
			r.check = im.checkTable(s, r)
		}
	}
	im.onUnhealthy(s)
	im.quorumOf(s)
}

// dropReals leaves out, reported, the real servers lbd would refuse in
// this service: another family than its VIPs', or a second one of the
// same address and port.
func (im *importer) dropReals(s *svc) {
	fam := s.ep.family()
	if s.ep.fwmark != 0 {
		fam = s.fwmarkFamily()
	}
	seen := map[string]*real{}
	var keep []*real
	for _, r := range s.reals {
		key := r.String()
		switch {
		case family(r.addr) != fam:
			im.rep.notMapped(r.n, "an IPv%d real server in an IPv%d service (%s): lbd forwards within one family; not written", family(r.addr), fam, s.ep.name)
		case seen[key] != nil:
			im.rep.notMapped(r.n, "the same real server as at %s: not written again", seen[key].n.Pos)
		default:
			seen[key] = r
			keep = append(keep, r)
		}
	}
	s.reals = keep
}

// onUnhealthy decides the service's on_unhealthy. keepalived removes a
// failed real server unless it has inhibit_on_failure (then weight 0);
// lbd decides per service: remove when none inhibits, else drain, and the
// real servers that keepalived would have removed are reported.
func (im *importer) onUnhealthy(s *svc) {
	inhibit := func(r *real) bool {
		if r.inhibit != nil {
			return *r.inhibit
		}
		return s.inhibit
	}
	any := false
	for _, r := range s.reals {
		any = any || inhibit(r)
	}
	if !any {
		s.top.str("on_unhealthy", "remove")
		return
	}
	s.top.str("on_unhealthy", "drain")
	for _, r := range s.reals {
		if !inhibit(r) {
			im.rep.differs(r.n, "keepalived removes this real server when it fails (no inhibit_on_failure); lbd decides per service and drains it (weight 0) as the service's others")
		}
	}
}

// quorumOf maps quorum and hysteresis. keepalived's quorum is a sum of
// the live real servers' weights; lbd's counts healthy real servers.
// They agree exactly when all weights are equal (lbd's quorum is then
// ⌈quorum/weight⌉), or when any one real server's weight reaches it, and
// there is no hysteresis.
func (im *importer) quorumOf(s *svc) {
	q := 1
	if s.quorum != nil {
		a, _ := s.quorum.Arg(0)
		v, err := strconv.ParseUint(a, 10, 31)
		if err != nil || v == 0 {
			im.rep.notMapped(s.quorum, "quorum %q is not a positive number; lbd's default 1 is used", a)
		} else {
			q = int(v)
		}
	}
	if s.hyst != nil {
		if a, _ := s.hyst.Arg(0); a != "0" {
			im.rep.differs(s.hyst, "lbd has no quorum hysteresis: the service goes below quorum and back at the same count")
		}
	}
	n, exact := countQuorum(q, s.reals)
	if !exact && s.quorum != nil {
		im.rep.differs(s.quorum, "keepalived's quorum is a sum of weights (%d), lbd's a count of healthy real servers: written as %d, the fewest real servers whose weights reach %d", q, n, q)
	}
	if n > 1 {
		s.top.num("quorum", int64(n))
	}
	im.sorry(s)
}

// countQuorum is the count of healthy real servers standing for a sum of
// weights q: exact when the weights are all equal, otherwise the fewest
// real servers whose largest weights reach q (at least 1, at most all).
func countQuorum(q int, reals []*real) (int, bool) {
	if len(reals) == 0 {
		return 1, q <= 1
	}
	ws := make([]int, len(reals))
	for i, r := range reals {
		ws[i] = r.weight
	}
	slices.Sort(ws)
	equal := ws[0] == ws[len(ws)-1] && ws[0] > 0
	if equal {
		n := (q + ws[0] - 1) / ws[0]
		return min(max(n, 1), len(ws)), n <= len(ws)
	}
	sum, n := 0, 0
	for i := len(ws) - 1; i >= 0 && sum < q; i-- {
		sum += ws[i]
		n++
	}
	// Exact also when q is at most the smallest weight: any one live
	// real server reaches it, as lbd's quorum 1 says.
	return max(n, 1), q <= ws[0]
}

// sorry maps sorry_server (lbd serves only it below quorum, as keepalived
// does), with sorry_server_lvs_method and sorry_server_inhibit.
func (im *importer) sorry(s *svc) {
	if s.sorry == nil {
		return
	}
	a0, _ := s.sorry.Arg(0)
	addr, err := netip.ParseAddr(a0)
	if err != nil || addr.Zone() != "" {
		im.rep.notMapped(s.sorry, "%q is not an IP address", a0)
		return
	}
	addr = addr.Unmap()
	fam := s.ep.family()
	if s.ep.fwmark != 0 {
		fam = s.fwmarkFamily()
	}
	if family(addr) != fam {
		im.rep.notMapped(s.sorry, "an IPv%d sorry server for an IPv%d service: lbd forwards within one family; not written", family(addr), fam)
		return
	}
	port := s.ep.port
	if a1, ok := s.sorry.Arg(1); ok && s.fwd.method == "nat" && s.ep.fwmark == 0 {
		p, err := strconv.ParseUint(a1, 10, 16)
		if err != nil || p == 0 {
			im.rep.notMapped(s.sorry, "port %q is not 1–65535", a1)
			return
		}
		port = int(p)
	} else if ok && a1 != strconv.Itoa(s.ep.port) && a1 != "0" {
		im.rep.differs(s.sorry, "IPVS cannot map ports with DR, TUN or a firewall mark: the sorry server gets the service's (the kernel ignored %s too)", a1)
	}
	value := netip.AddrPortFrom(addr, uint16(port)).String()
	if s.ep.fwmark != 0 {
		value = addr.String()
	}
	s.top.str("quorum_fallback", "sorry")
	s.top.str("sorry_server", value)
	for _, kw := range []string{"sorry_server_lvs_method", "sorry_server_inhibit"} {
		if c := s.n.Child(kw); c != nil {
			im.sorryOption(s, c)
		}
	}
}

func (im *importer) sorryOption(s *svc, c *conf.Node) {
	if c.Keyword == "sorry_server_inhibit" {
		im.rep.differs(c, "lbd takes the sorry server out of IPVS when quorum returns (keepalived keeps it at weight 0)")
		return
	}
	f, err := parseForward(c.Args)
	if err != nil || f.method != s.fwd.method {
		im.rep.notMapped(c, "lbd forwards to the sorry server by the service's method (%s)", s.fwd.method)
		return
	}
	if f != s.fwd {
		im.rep.notMapped(c, "lbd forwards to the sorry server with the service's tunnel options")
	}
}

// realKeys are a real server's keys; its check is written after them.
func (r *real) keys(s *svc) table {
	var t table
	t.str("address", r.addr.String())
	switch {
	case s.ep.fwmark != 0:
		// IPVS keeps the packet's port: the real server's is its check's
	case s.fwd.method != "nat" && r.port != s.ep.port && r.port != 0:
		// DR and TUN cannot map ports; the check keeps the port
	case r.port != 0 && r.port != s.ep.port:
		t.num("port", int64(r.port))
	}
	if r.weight != 1 {
		t.num("weight", int64(r.weight))
	}
	if r.fwd != nil && *r.fwd != s.fwd {
		r.fwd.write(&t)
	}
	return t
}

func (r *real) String() string { return fmt.Sprintf("%s:%d", r.addr, r.port) }
