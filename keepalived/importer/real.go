package importer

import (
	"net/netip"
	"strconv"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// real is one real_server being built.
type real struct {
	n       *conf.Node
	addr    netip.Addr
	port    int
	weight  int
	inhibit *bool
	fwd     *forward
	alpha   *bool
	timing  timing
	// checkNode is the checker mapped; check its lbd keys (nil: none).
	checkNode *conf.Node
	check     table
}

// realCheckers are the checkers lbd maps; the others it reports.
var realCheckers = map[string]bool{"TCP_CHECK": true, "HTTP_GET": true, "SSL_GET": true, "MISC_CHECK": true, "DNS_CHECK": true, "UDP_CHECK": true}

var rsNotMapped = map[string]string{
	"notify_up":   "lbd runs no per-real-server scripts: follow `lbd status` or its metrics",
	"notify_down": "lbd runs no per-real-server scripts: follow `lbd status` or its metrics",
	"uthreshold":  "lbd sets no connection thresholds",
	"lthreshold":  "lbd sets no connection thresholds",
	"smtp_alert":  "lbd sends no mail: alert on its metrics",
	"PING_CHECK":  "lbd has no ICMP check",
	"SMTP_CHECK":  "lbd has no SMTP check (a tcp check on port 25 checks less)",
	"BFD_CHECK":   "lbd has no BFD",
	"FILE_CHECK":  "lbd has no file check",
}

// realServer reads `real_server IP [PORT] { … }`; its checker is mapped
// once the service's timings are all known.
func (im *importer) realServer(s *svc, c *conf.Node) {
	a0, _ := c.Arg(0)
	addr, err := netip.ParseAddr(a0)
	if err != nil || addr.Zone() != "" {
		im.rep.notMapped(c, "%q is not an IP address: not written", a0)
		return
	}
	r := &real{n: c, addr: addr.Unmap(), weight: 1}
	if a1, ok := c.Arg(1); ok {
		p, err := strconv.ParseUint(a1, 10, 16)
		if err != nil {
			im.rep.notMapped(c, "port %q is not 0–65535: not written", a1)
			return
		}
		r.port = int(p)
	}
	var checkers []*conf.Node
	for i := range c.Children {
		k := &c.Children[i]
		if r.timing.read(&im.rep, k) {
			continue
		}
		switch {
		case realCheckers[k.Keyword]:
			checkers = append(checkers, k)
		case rsNotMapped[k.Keyword] != "":
			im.rep.notMapped(k, "%s", rsNotMapped[k.Keyword])
		default:
			im.rsKeyword(r, k)
		}
	}
	s.reals = append(s.reals, r)
	if len(checkers) > 0 {
		for _, extra := range checkers[1:] {
			im.rep.notMapped(extra, "lbd runs one check per real server; the first, at %s, is mapped (keepalived needs all to pass)", checkers[0].Pos)
		}
		r.checkNode = checkers[0] // mapped once the service's timings are known
	}
}

// rsKeyword maps the real server's own settings.
func (im *importer) rsKeyword(r *real, k *conf.Node) {
	arg, _ := k.Arg(0)
	switch k.Keyword {
	case "weight":
		w, err := strconv.ParseUint(arg, 10, 16)
		if err != nil {
			im.rep.notMapped(k, "weight %q is not 0–65535; written as 1", arg)
			return
		}
		r.weight = int(w)
	case "lvs_method":
		f, err := parseForward(k.Args)
		if err != nil {
			im.rep.notMapped(k, "%v; the service's method is used", err)
			return
		}
		r.fwd = &f
	case "inhibit_on_failure":
		v := boolArg(k)
		r.inhibit = &v
	case "alpha":
		v := boolArg(k)
		r.alpha = &v
	case "snmp_name":
		im.rep.add(k, Unneeded, "lbd has no SNMP")
	default:
		im.rep.unknown(k, "a real_server")
	}
}
