package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/lbdproject/lbd/config/internal/tree"
	"github.com/lbdproject/lbd/lvs"
)

// Defaults, documented in docs/config-reference.md.
const (
	defaultMinSyncPeriod     = time.Second
	defaultSyncPeriod        = 30 * time.Second
	defaultBurst             = 2
	defaultMaxDeleteFraction = 0.5
	defaultInterface         = "lbd0"
	defaultMasqueradeBit     = 14
	defaultNodePortMin       = 30000
	defaultNodePortMax       = 32767
	defaultSocket            = "/run/lbd/lbd.sock"
	defaultMetricsListen     = "127.0.0.1:9712"
	defaultConsulAddress     = "127.0.0.1:8500"
	defaultScheduler         = "wrr"
	defaultAffinityTimeout   = 10800 * time.Second // kube-proxy's ClientIP default
	defaultDrainTimeout      = 5 * time.Minute
	defaultWeightMeta        = "lbd-weight"
	defaultCheckUser         = "nobody"
)

var (
	schedulers = []string{"rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq", "mh"}
	// schedulerFlags lists the IPVS scheduler flags each scheduler accepts.
	schedulerFlags = map[string][]string{
		"sh": {"sh-fallback", "sh-port"},
		"mh": {"mh-fallback", "mh-port"},
	}
	serviceName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	ifName      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$`)
)

// Defaults returns the configuration of an empty lbd.toml.
func Defaults() Config {
	return Config{
		Sync: Sync{
			MinSyncPeriod:     defaultMinSyncPeriod,
			SyncPeriod:        defaultSyncPeriod,
			Burst:             defaultBurst,
			MaxDeleteFraction: defaultMaxDeleteFraction,
		},
		Dataplane: Dataplane{
			Interface:     defaultInterface,
			MasqueradeBit: defaultMasqueradeBit,
			StrictARP:     true,
			NodePortMin:   defaultNodePortMin,
			NodePortMax:   defaultNodePortMax,
		},
		Status: Status{Socket: defaultSocket, MetricsListen: defaultMetricsListen},
		Consul: Consul{Address: defaultConsulAddress, Scheme: "http"},
	}
}

func decodeGlobals(n *node, c *Config) {
	if t := n.table("sync"); t != nil {
		s := &c.Sync
		t.duration("min_sync_period", &s.MinSyncPeriod, 0, time.Hour)
		t.duration("sync_period", &s.SyncPeriod, time.Second, 24*time.Hour)
		t.integer("burst", &s.Burst, 1, 100)
		t.float("max_delete_fraction", &s.MaxDeleteFraction, 0, 1)
		if s.MinSyncPeriod > s.SyncPeriod {
			t.errorf("min_sync_period", "%s is longer than sync_period (%s); expected at most sync_period", s.MinSyncPeriod, s.SyncPeriod)
		}
		t.finish()
	}
	if t := n.table("dataplane"); t != nil {
		d := &c.Dataplane
		if t.str("interface", &d.Interface) && !ifName.MatchString(d.Interface) {
			t.errorf("interface", "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", d.Interface)
		}
		t.integer("masquerade_bit", &d.MasqueradeBit, 0, 31)
		d.LocalNetworks = t.prefixes("local_networks")
		d.RealServerNetworks = t.prefixes("real_server_networks")
		t.boolean("strict_arp", &d.StrictARP)
		var keys []string
		d.NodeCIDRs, keys = t.prefixesAt("node_cidrs")
		for i, p := range d.NodeCIDRs {
			if a := p.Addr(); a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsMulticast() {
				t.errorf(keys[i], "%s never holds node addresses (loopback, link-local and multicast are excluded); expected the networks of the box's own addresses", p)
			}
		}
		var r string
		if t.str("node_port_range", &r) {
			lo, hi, ok := parsePortRange(r)
			if !ok {
				t.errorf("node_port_range", "%q is not a port range; expected \"FIRST-LAST\" with 1 <= FIRST <= LAST <= 65535, such as \"30000-32767\"", r)
			} else {
				d.NodePortMin, d.NodePortMax = lo, hi
			}
		}
		t.finish()
	}
	if t := n.table("ipvs"); t != nil {
		t.seconds("tcp_timeout", &c.IPVS.TCPTimeout, 0, 30*24*time.Hour)
		t.seconds("tcp_fin_timeout", &c.IPVS.TCPFinTimeout, 0, 30*24*time.Hour)
		t.seconds("udp_timeout", &c.IPVS.UDPTimeout, 0, 30*24*time.Hour)
		t.finish()
	}
	if t := n.table("status"); t != nil {
		if t.str("socket", &c.Status.Socket) && !filepath.IsAbs(c.Status.Socket) {
			t.errorf("socket", "%q is not an absolute path; expected one such as %q", c.Status.Socket, defaultSocket)
		}
		if t.str("metrics_listen", &c.Status.MetricsListen) && c.Status.MetricsListen != "" {
			t.hostPort("metrics_listen", c.Status.MetricsListen)
		}
		t.boolean("real_server_metrics", &c.Status.RealServerMetrics)
		t.finish()
	}
	if t := n.table("consul"); t != nil {
		decodeConsul(t, &c.Consul)
	}
}

func (n *node) hostPort(key, s string) {
	host, port, err := net.SplitHostPort(s)
	p, perr := strconv.Atoi(port)
	if err != nil || perr != nil || p < 1 || p > 65535 {
		n.errorf(key, "%q is not HOST:PORT; expected one such as \"127.0.0.1:9712\" or \"[::1]:9712\"", s)
		return
	}
	if host != "" && host != "localhost" {
		if _, err := netip.ParseAddr(host); err != nil {
			n.errorf(key, "%q: host %q is not an IP address; expected an IP address, \"localhost\" or nothing (all addresses)", s, host)
		}
	}
}

// seconds decodes a duration that the kernel keeps in whole seconds.
func (n *node) seconds(key string, dst *time.Duration, lo, hi time.Duration) bool {
	var d time.Duration
	if !n.duration(key, &d, lo, hi) {
		return false
	}
	if d%time.Second != 0 {
		n.errorf(key, "%s is not a whole number of seconds; the kernel keeps this timeout in seconds", d)
		return false
	}
	*dst = d
	return true
}

func parsePortRange(s string) (lo, hi uint16, ok bool) {
	a, b, found := strings.Cut(s, "-")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.Atoi(strings.TrimSpace(a))
	y, err2 := strconv.Atoi(strings.TrimSpace(b))
	if err1 != nil || err2 != nil || x < 1 || y > 65535 || x > y {
		return 0, 0, false
	}
	return uint16(x), uint16(y), true
}

// decodeService decodes one [[service]] table. Checks that need other
// services or the global settings happen later, in validate.
//
// The order of the steps is visible: it is the order of the errors, and
// of the keys that an unknown key's error lists as accepted.
func decodeService(n *node) Service {
	s := Service{
		Protocol:               lvs.TCP,
		Scheduler:              defaultScheduler,
		SessionAffinityTimeout: defaultAffinityTimeout,
		SNAT:                   SNATAuto,
		Announce:               AnnounceRoute,
		OnUnhealthy:            Drain,
		DrainTimeout:           defaultDrainTimeout,
		Quorum:                 1,
		Pos:                    n.pos(""),
	}
	decodeServiceName(n, &s)
	decodeProtocol(n, &s)
	vipKeys := decodeVIPsAndPorts(n, &s)
	decodeScheduling(n, &s)
	var v string
	if n.oneOf("snat", &v, string(SNATAuto), string(SNATAlways), string(SNATNever)) {
		s.SNAT = SNATMode(v)
	}
	decodeForward(n, &s)
	n.boolean("adopt", &s.Adopt)
	decodeAnnounce(n, &s)
	w := decodeHealth(n, &s)
	decodeRealServers(n, &s, w)
	decodeSourceRanges(n, &s)
	decodeServiceConsul(n, &s)
	decodeQuorum(n, &s)
	checkForward(n, &s)
	checkFWMark(n, &s)
	recordPositions(n, &s, vipKeys)
	n.finish()
	return s
}

func decodeServiceName(n *node, s *Service) {
	if !n.str("name", &s.Name) {
		if !n.has("name") {
			n.errorf("", "service has no name; expected name = \"...\" (letters, digits, '.', '_' or '-')")
		}
	} else if !serviceName.MatchString(s.Name) {
		n.errorf("name", "%q is not a valid service name; expected 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", s.Name)
	}
}

func decodeProtocol(n *node, s *Service) {
	var proto string
	if n.oneOf("protocol", &proto, string(lvs.TCP), string(lvs.UDP), string(lvs.SCTP)) {
		s.Protocol = lvs.Protocol(proto)
	}
}

// decodeVIPsAndPorts decodes where clients reach the service: its VIPs
// and port, and/or a node port.
//
// It returns the key of each of s.VIPs: vips[i] is not s.VIPs[i] when an
// element before it is refused.
func decodeVIPsAndPorts(n *node, s *Service) (vipKeys []string) {
	s.VIPs, vipKeys = n.addrs("vips")
	decodeVIPs(n, s, vipKeys)
	if n.has("fwmark") {
		decodeFWMark(n, s)
		return vipKeys
	}
	n.port("port", &s.Port)
	n.port("node_port", &s.NodePort)
	switch {
	case n.has("vips") && !n.has("port"):
		n.errorf("", "service %q has vips but no port; expected port = 1..65535", s.Name)
	case n.has("port") && !n.has("vips") && !n.has("node_port"):
		n.errorf("port", "service %q has a port but no vips; expected vips = [\"...\"] (or node_port alone for a NodePort-like service)", s.Name)
	case !n.has("vips") && !n.has("node_port"):
		n.errorf("", "service %q is reachable nowhere; expected vips = [...] with port, and/or node_port", s.Name)
	}
	return vipKeys
}

// decodeHealth decodes the service's health check and what happens to a
// real server that fails it.
func decodeHealth(n *node, s *Service) written {
	check := defaultCheck(s.Protocol)
	var w written
	if t := n.table("health_check"); t != nil {
		check, w = decodeCheck(t, check, written{})
	}
	// One copy, shared by the real servers without overrides: a
	// HealthCheck is large.
	s.HealthCheck = &check
	var v string
	if n.oneOf("on_unhealthy", &v, string(Drain), string(Remove)) {
		s.OnUnhealthy = OnUnhealthy(v)
	}
	n.duration("drain_timeout", &s.DrainTimeout, 0, 24*time.Hour)
	return w
}

// decodeRealServers decodes the service's [[service.real_server]] tables
// (after its health check, which they inherit).
func decodeRealServers(n *node, s *Service, w written) {
	if ts := n.tables("real_server"); len(ts) > 0 {
		// Sized once: append would leave up to half of a grown slice
		// unused.
		s.RealServers = n.src.reals.alloc(len(ts))
		for _, t := range ts {
			s.RealServers = append(s.RealServers, decodeRealServer(t, s, s.HealthCheck, w))
		}
	}
	checkDuplicateRealServers(n, s.RealServers)
}

func decodeSourceRanges(n *node, s *Service) {
	var keys []string
	s.SourceRanges, keys = n.prefixesAt("source_ranges")
	for i, p := range s.SourceRanges {
		if family(p.Addr()) != s.Family() {
			n.errorf(keys[i], "%s is IPv%d but the service is IPv%d; expected ranges of the service's family", p, family(p.Addr()), s.Family())
		}
	}
}

// decodeServiceConsul decodes the service's [service.consul] (real servers
// from Consul) and [service.consul_register] (its VIPs into Consul).
func decodeServiceConsul(n *node, s *Service) {
	if t := n.table("consul"); t != nil {
		s.Consul = decodeConsulService(t)
		s.Consul.OwnChecks = n.has("health_check")
	}
	if t := n.table("consul_register"); t != nil {
		s.Register = decodeConsulRegister(t, s)
		if len(s.VIPs) == 0 && n.has("node_port") {
			n.errorf("consul_register", "a NodePort-like service without VIPs has no VIP to register; expected vips = [...] or no [service.consul_register]")
		}
	}
}

// recordPositions keeps where the keys are that validate's checks across
// services point at.
func recordPositions(n *node, s *Service, vipKeys []string) {
	s.path = n.path
	s.namePos = n.pos("name")
	if s.NodePort != 0 {
		s.nodePortPos = n.pos("node_port")
	}
	if s.SorryServer != nil {
		s.sorryPos = n.pos("sorry_server")
	}
	if s.FWMark != 0 {
		s.fwmarkPos = n.pos("fwmark")
	}
	if len(s.VIPs) > 0 {
		s.vipPos = make([]Pos, len(s.VIPs))
		for i := range s.VIPs {
			s.vipPos[i] = n.pos(vipKeys[i])
		}
		s.vipKeys = vipKeys
	}
}

func decodeVIPs(n *node, s *Service, keys []string) {
	var seen map[netip.Addr]int // for many VIPs; few are compared in place
	if len(s.VIPs) > smallList {
		seen = make(map[netip.Addr]int, len(s.VIPs))
	}
	for i, a := range s.VIPs {
		key := keys[i]
		switch {
		case !a.IsGlobalUnicast() || a.IsLinkLocalUnicast():
			n.errorf(key, "%s is not a unicast address a client can reach (loopback, link-local, multicast and unspecified are refused); expected a routable unicast VIP", a)
		case family(a) != family(s.VIPs[0]):
			n.errorf(key, "%s is IPv%d but the first VIP %s is IPv%d; a service's real servers are of one family, so its VIPs must be too: expected a separate service for each family", a, family(a), s.VIPs[0], family(s.VIPs[0]))
		}
		// j is the latest earlier listing of the same VIP.
		j, dup := -1, false
		if seen != nil {
			j, dup = seen[a]
			seen[a] = i
		} else {
			for k := i - 1; k >= 0 && !dup; k-- {
				j, dup = k, s.VIPs[k] == a
			}
		}
		if dup {
			n.errorf(key, "%s is listed twice (also %s); expected each VIP once", a, keys[j])
		}
	}
}

// smallList is the length up to which duplicates are looked for by
// comparing in place rather than with a map.
const smallList = 16

func decodeScheduling(n *node, s *Service) {
	n.oneOf("scheduler", &s.Scheduler, schedulers...)
	if n.strings("scheduler_flags", &s.SchedulerFlags) {
		accepted := schedulerFlags[s.Scheduler]
		for i, f := range s.SchedulerFlags {
			if !slices.Contains(accepted, f) {
				key := fmt.Sprintf("scheduler_flags[%d]", i)
				if len(accepted) == 0 {
					n.errorf(key, "scheduler %q takes no flags; expected flags only with sh (sh-fallback, sh-port) or mh (mh-fallback, mh-port)", s.Scheduler)
				} else {
					n.errorf(key, "%q is not a flag of scheduler %q; expected one of: %s", f, s.Scheduler, whole(strings.Join(accepted, ", ")))
				}
			}
		}
	}
	n.boolean("session_affinity", &s.SessionAffinity)
	if n.seconds("session_affinity_timeout", &s.SessionAffinityTimeout, time.Second, 24*time.Hour) && !s.SessionAffinity {
		n.errorf("session_affinity_timeout", "has no effect without session_affinity = true; expected it only together with session_affinity")
	}
}

func decodeAnnounce(n *node, s *Service) {
	var v string
	if n.oneOf("announce", &v, string(AnnounceRoute), string(AnnounceARP)) {
		s.Announce = Announce(v)
	}
	hasIf := n.str("announce_interface", &s.AnnounceInterface)
	switch {
	case s.Announce == AnnounceARP && !hasIf:
		n.errorf("announce", "announce = \"arp\" needs the interface to answer ARP (IPv4) and neighbour solicitations (IPv6) on; expected announce_interface = \"eth0\" (or similar)")
	case s.Announce == AnnounceRoute && hasIf:
		n.errorf("announce_interface", "is only used with announce = \"arp\"; expected announce = \"arp\" or no announce_interface")
	case hasIf && !ifName.MatchString(s.AnnounceInterface):
		n.errorf("announce_interface", "%q is not a valid interface name; expected 1 to 15 letters, digits, '.', '_' or '-'", s.AnnounceInterface)
	}
	// announce = "arp" answers ARP for IPv4 VIPs and neighbour
	// solicitations (NDP) for IPv6 ones: the key keeps its name.
	if s.Announce == AnnounceARP && s.NodePort != 0 && len(s.VIPs) == 0 {
		n.errorf("announce", "a NodePort-like service without VIPs has nothing to announce; expected announce = \"route\"")
	}
}

// realServers hands out the RealServers slices of a file's services from
// shared chunks. A slice of its own for each service would waste the
// rounding up to the allocator's size class, ~10 % for the common sizes.
// Each slice has cap == len, so that an append elsewhere copies it rather
// than write into a neighbour. A nil *realServers allocates each slice.
type realServers struct {
	free []RealServer
	// want is how many real servers the file's services still need, so
	// that the last chunk is no larger than that.
	want int
}

// realServerChunk is the most real servers of one chunk: ~256 KiB, so that a
// service kept alive alone keeps little else with it.
const realServerChunk = (256 << 10) / int(unsafe.Sizeof(RealServer{}))

// alloc returns a slice with length 0 and capacity n.
func (a *realServers) alloc(n int) []RealServer {
	if a == nil || n >= realServerChunk {
		return make([]RealServer, 0, n)
	}
	if len(a.free) < n {
		a.free = make([]RealServer, min(realServerChunk, max(n, a.want)))
	}
	s := a.free[:0:n]
	a.free = a.free[n:]
	a.want -= n
	return s
}

// decodeRealServer decodes one of s's real servers; check is s's check,
// which the real server points at unless it overrides some of it.
func decodeRealServer(n *node, s *Service, check *HealthCheck, w written) RealServer {
	r := RealServer{Port: s.Port, Weight: 1, HealthCheck: check, Pos: n.pos("")}
	if !n.addr("address", &r.Address) && !n.has("address") {
		n.errorf("", "real server has no address; expected address = \"10.0.0.11\" (or similar)")
	}
	switch {
	case s.FWMark != 0:
		decodeFWMarkRealServerPort(n, &r)
	case !n.port("port", &r.Port) && !n.has("port") && r.Port == 0:
		n.errorf("", "real server has no port and service %q has none to inherit (NodePort-only); expected port = 1..65535", s.Name)
	}
	n.integer("weight", &r.Weight, 0, 65535)
	decodeRealServerForward(n, s, &r)
	if r.Address.IsValid() {
		reason, forbidden := ForbiddenRealServer(r.Address)
		switch {
		case forbidden:
			n.errorf("address", "%s is not a routable unicast address (it is %s; loopback, link-local, multicast, broadcast, unspecified and 0.0.0.0/8 are refused: IPVS NAT cannot forward to them); expected a real server's address", r.Address, reason)
		case s.knownFamily() != 0 && family(r.Address) != s.Family():
			n.errorf("address", "%s is IPv%d but service %q is IPv%d; %s: expected an IPv%d real server", r.Address, family(r.Address), s.Name, s.Family(), whole(familyReason(r.Forward.Method)), s.Family())
		case slices.Contains(s.VIPs, r.Address):
			n.errorf("address", "%s is a VIP of this service; a real server cannot be its own VIP", r.Address)
		}
	}
	if t := n.table("health_check"); t != nil {
		c, _ := decodeCheck(t, *s.HealthCheck, w)
		r.HealthCheck = &c
	}
	n.finish()
	return r
}

func checkDuplicateRealServers(n *node, rss []RealServer) {
	var seen map[netip.AddrPort]int // for many real servers
	if len(rss) > smallList {
		seen = make(map[netip.AddrPort]int, len(rss))
	}
	for i, r := range rss {
		if !r.Address.IsValid() {
			continue
		}
		// j is the first earlier real server with the same address:port.
		j, dup := -1, false
		if seen != nil {
			if j, dup = seen[r.AddrPort()]; !dup {
				seen[r.AddrPort()] = i
			}
		} else {
			for k := 0; k < i && !dup; k++ {
				j, dup = k, rss[k].Address.IsValid() && rss[k].AddrPort() == r.AddrPort()
			}
		}
		if dup {
			n.errorf(fmt.Sprintf("real_server[%d].address", i), "real server %s is listed twice (first at %s); expected each address:port once per service", r.AddrPort(), rss[j].Pos)
		}
	}
}

func decodeConsulService(n *node) *ConsulService {
	c := &ConsulService{WeightMeta: defaultWeightMeta, DefaultWeight: 1, PassingOnly: true, Pos: n.pos("")}
	if !n.str("service", &c.Service) && !n.has("service") {
		n.errorf("", "names no Consul service; expected service = \"...\"")
	}
	n.strings("tags", &c.Tags)
	n.str("datacenter", &c.Datacenter)
	n.port("port", &c.Port)
	n.str("weight_meta", &c.WeightMeta)
	n.integer("default_weight", &c.DefaultWeight, 0, 65535)
	n.boolean("passing_only", &c.PassingOnly)
	n.finish()
	return c
}

func decodeConsulRegister(n *node, s *Service) *ConsulRegister {
	r := &ConsulRegister{Name: s.Name, Pos: n.pos("")}
	if n.str("name", &r.Name) && !serviceName.MatchString(r.Name) {
		n.errorf("name", "%q is not a valid Consul service name; expected 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", r.Name)
	}
	n.strings("tags", &r.Tags)
	n.finish()
	return r
}

func decodeQuorum(n *node, s *Service) {
	n.integer("quorum", &s.Quorum, 1, 10000)
	var ss string
	if n.str("sorry_server", &ss) {
		ap, err := netip.ParseAddrPort(ss)
		fwOK := false
		if s.FWMark != 0 {
			ap, fwOK = parseFWMarkSorry(ss)
		}
		switch {
		case s.FWMark != 0 && !fwOK:
			n.errorf("sorry_server", "%q: a firewall-mark service's sorry server takes the packet's own port, as its real servers; expected an address, such as \"10.0.0.99\"", ss)
		case s.FWMark == 0 && (err != nil || ap.Port() == 0):
			n.errorf("sorry_server", "%q is not ADDRESS:PORT; expected one such as \"10.0.0.99:8080\" or \"[2001:db8::99]:8080\"", ss)
		case family(ap.Addr()) != s.Family():
			n.errorf("sorry_server", "%s is IPv%d but the service is IPv%d; expected a sorry server of the service's family", ap.Addr(), family(ap.Addr()), s.Family())
		case forbiddenSorry(ap.Addr()) != "":
			n.errorf("sorry_server", "%s is not a routable unicast address (it is %s; IPVS NAT cannot forward to it); expected a real server's address", ap.Addr(), forbiddenSorry(ap.Addr()))
		default:
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			s.SorryServer = &ap
		}
	}
	s.QuorumFallback = QuorumHealthy
	if n.has("sorry_server") {
		s.QuorumFallback = QuorumSorry
	}
	var v string
	if n.oneOf("quorum_fallback", &v, string(QuorumHealthy), string(QuorumSorry), string(QuorumKeep)) {
		s.QuorumFallback = QuorumFallback(v)
		switch {
		case s.QuorumFallback == QuorumSorry && !n.has("sorry_server"):
			n.errorf("quorum_fallback", "\"sorry\" needs a sorry server; expected sorry_server = \"ADDRESS:PORT\"")
		case s.QuorumFallback != QuorumSorry && n.has("sorry_server"):
			n.errorf("sorry_server", "is never used with quorum_fallback = %q; expected quorum_fallback = \"sorry\" or no sorry_server", v)
		}
	}
	if s.Consul == nil && n.has("quorum") && s.Quorum > len(s.RealServers) {
		n.errorf("quorum", "%d can never be met: service %q has %d real servers; expected at most %d", s.Quorum, s.Name, len(s.RealServers), len(s.RealServers))
	}
}

// forbiddenSorry is ForbiddenRealServer's reason for a sorry server, or "".
func forbiddenSorry(a netip.Addr) string {
	reason, _ := ForbiddenRealServer(a)
	return reason
}

// isEmptyArray reports whether key holds an empty array.
func isEmptyArray(n *node, key string) bool {
	v, _ := n.t.Get(key)
	a, ok := v.(*tree.Array)
	return ok && len(a.Elems) == 0
}
