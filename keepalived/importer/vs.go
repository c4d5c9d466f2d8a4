package importer

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// svc is one service being built from a virtual_server.
type svc struct {
	n       *conf.Node
	ep      endpoint
	proto   string
	fwd     forward
	sched   string
	timing  timing
	alpha   bool
	inhibit bool // virtual-server-wide inhibit_on_failure
	top     table
	reals   []*real
	sorry   *conf.Node
	quorum  *conf.Node
	hyst    *conf.Node
	ipv6    bool // ip_family inet6, for a firewall-mark service
	// announceIf is set when a VRRP instance carries the service's VIPs:
	// keepalived's master answers ARP for them on that interface.
	announceIf string
}

// lbdSchedulers are the schedulers lbd takes.
var lbdSchedulers = []string{"rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq", "mh"}

// service maps the virtual server n to a service keyed by ep.
func (im *importer) service(n *conf.Node, ep endpoint) {
	s := &svc{n: n, ep: ep, proto: "tcp", sched: "wlc", fwd: forward{method: "nat"}}
	for i := range n.Children {
		c := &n.Children[i]
		im.vsKeyword(s, c)
	}
	if !im.claim(s) {
		return
	}
	im.finishReals(s)
	// rendered once the VRRP instances have said how its VIPs are announced
	im.out = append(im.out, Service{Name: im.uniqueName(ep.name + "-" + s.proto), node: n, vips: s.ep.vips, svc: s})
}

// vsKeyword maps one statement of a virtual_server block.
func (im *importer) vsKeyword(s *svc, c *conf.Node) {
	if s.timing.read(&im.rep, c) {
		return
	}
	arg, _ := c.Arg(0)
	switch c.Keyword {
	case "protocol":
		im.protocol(s, c, arg)
	case "lb_algo", "lvs_sched":
		if slices.Contains(lbdSchedulers, arg) {
			s.sched = arg
		} else {
			im.rep.notMapped(c, "lbd has no scheduler %q (it has %s); written as wlc, keepalived's default", arg, strings.Join(lbdSchedulers, ", "))
		}
	case "hashed", "ops", "flag-1", "flag-2", "flag-3", "sh-port", "sh-fallback", "mh-port", "mh-fallback":
		// mapped by schedFlags once the scheduler is known
	case "lb_kind", "lvs_method":
		f, err := parseForward(c.Args)
		if err != nil {
			im.rep.notMapped(c, "%v; written as NAT", err)
		} else {
			s.fwd = f
		}
	case "persistence_timeout":
		im.persistence(s, c)
	case "persistence_granularity":
		if !hostMask(arg) {
			im.rep.notMapped(c, "lbd's persistence is per client address (/32, /128): a netmask %q groups clients lbd does not", arg)
		}
	case "inhibit_on_failure":
		s.inhibit = boolArg(c)
	case "alpha":
		s.alpha = boolArg(c)
	case "sorry_server":
		s.sorry = c
	case "quorum":
		s.quorum = c
	case "hysteresis":
		s.hyst = c
	case "ip_family":
		s.ipv6 = arg == "inet6"
	case "real_server":
		im.realServer(s, c)
	case "sorry_server_lvs_method", "sorry_server_inhibit":
		// read with sorry_server
	default:
		im.vsOther(c)
	}
}

// vsNotMapped are virtual_server keywords lbd has no counterpart for.
var vsNotMapped = map[string]string{
	"persistence_engine": "lbd has no IPVS persistence engines (SIP)",
	"ha_suspend":         "lbd keeps virtual servers in place whether or not their VIP is local; with [[vrrp]] the VIPs move with their instance",
	"smtp_alert":         "lbd sends no mail: alert on its metrics",
	"omega":              "lbd runs no quorum scripts",
	"quorum_up":          "lbd runs no quorum scripts: watch lbd's metrics or use [[vrrp]] track_services",
	"quorum_down":        "lbd runs no quorum scripts: watch lbd's metrics or use [[vrrp]] track_services",
}

func (im *importer) vsOther(c *conf.Node) {
	switch {
	case vsNotMapped[c.Keyword] != "":
		im.rep.notMapped(c, "%s", vsNotMapped[c.Keyword])
	case c.Keyword == "snmp_name":
		im.rep.add(c, Unneeded, "lbd has no SNMP")
	default:
		im.rep.unknown(c, "a virtual_server")
	}
}

func (im *importer) protocol(s *svc, c *conf.Node, arg string) {
	switch p := strings.ToLower(arg); p {
	case "tcp", "udp", "sctp":
		s.proto = p
	default:
		im.rep.notMapped(c, "lbd serves TCP, UDP and SCTP; written as TCP")
	}
}

// persistence maps persistence_timeout [N] (keepalived's default 360 s).
func (im *importer) persistence(s *svc, c *conf.Node) {
	secs := uint64(360)
	if a, ok := c.Arg(0); ok {
		v, err := strconv.ParseUint(a, 10, 32)
		if err != nil {
			im.rep.notMapped(c, "%q is not a number of seconds", a)
			return
		}
		secs = v
	}
	if secs == 0 {
		return
	}
	d := time.Duration(secs) * time.Second
	if d > 24*time.Hour {
		im.rep.differs(c, "lbd's session_affinity_timeout is at most 24h: written as 24h")
		d = 24 * time.Hour
	}
	s.top.set("session_affinity", "true")
	s.top.set("session_affinity_timeout", tomlDuration(d))
}

func hostMask(m string) bool {
	return m == "255.255.255.255" || m == "32" || m == "128" || m == "/32" || m == "/128"
}

// boolArg reads keepalived's optional boolean argument (absent is true).
func boolArg(c *conf.Node) bool {
	a, ok := c.Arg(0)
	if !ok {
		return true
	}
	switch strings.ToLower(a) {
	case "false", "off", "no", "0":
		return false
	}
	return true
}

// claim takes the service's keys; a VIP:port/protocol another service
// holds is reported and left out, and a service left with no key is not
// written.
func (im *importer) claim(s *svc) bool {
	if s.ep.fwmark != 0 {
		key := fmt.Sprintf("fwmark %d/ipv%d", s.ep.fwmark, s.fwmarkFamily())
		if prev, ok := im.claimed[key]; ok {
			im.rep.notMapped(s.n, "%s already the service of another virtual server (at %s); lbd takes one service per mark and family: not written", key, prev)
			return false
		}
		im.claimed[key] = s.n.Pos
		return true
	}
	var keep []netip.Addr
	var taken []string // the first few, for the report
	dups := 0
	for _, v := range s.ep.vips {
		key := fmt.Sprintf("%s/%s", netip.AddrPortFrom(v, uint16(s.ep.port)), s.proto)
		if prev, ok := im.claimed[key]; ok {
			if dups++; len(taken) < 3 {
				taken = append(taken, key+" (at "+prev.String()+")")
			}
			continue
		}
		im.claimed[key] = s.n.Pos
		keep = append(keep, v)
	}
	if dups > 0 {
		im.rep.notMapped(s.n, "%d VIP:port/protocol already the service of another virtual server, such as %s; lbd takes one service per VIP:port/protocol: not written",
			dups, strings.Join(taken, ", "))
	}
	s.ep.vips = keep
	return len(keep) > 0
}

// fwmarkFamily is a firewall-mark service's family: ip_family, else its
// first real server's, else IPv4.
func (s *svc) fwmarkFamily() int {
	if s.ipv6 {
		return 6
	}
	if len(s.reals) > 0 {
		return family(s.reals[0].addr)
	}
	return 4
}
