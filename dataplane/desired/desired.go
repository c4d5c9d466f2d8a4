// Package desired computes the complete kernel state lbd wants from the
// configuration, discovered real servers and their health. It is a pure
// function: no kernel, no clock, no I/O, so that `lbd plan` and the sync
// runner agree by construction and the logic is table-tested directly.
package desired

import (
	"net/netip"
	"slices"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/lvs"
)

// IPVS service flags (include/uapi/linux/ip_vs.h).
const (
	FlagPersistent = 0x1
	FlagSched1     = 0x8  // sh-fallback, mh-fallback
	FlagSched2     = 0x10 // sh-port, mh-port
)

var schedFlagBits = map[string]uint32{
	"sh-fallback": FlagSched1, "mh-fallback": FlagSched1,
	"sh-port": FlagSched2, "mh-port": FlagSched2,
}

// Service is one IPVS virtual server with its destinations.
type Service struct {
	Key       lvs.Key
	Scheduler string
	// Flags are the IPVS flags lbd sets; the kernel adds others (hashed).
	Flags uint32
	// Timeout is the persistence timeout in seconds (0: not persistent).
	Timeout uint32
	// Netmask groups clients for persistence: a mask for IPv4, a prefix
	// length for IPv6, as IPVS takes them.
	Netmask uint32
	Dests   []Dest // sorted by address
	// DrainTimeout bounds how long a destination that leaves the service
	// keeps weight 0 for its connections before it is deleted.
	DrainTimeout time.Duration

	// Name is the lbd service this virtual server belongs to.
	Name string
	// Healthy counts the service's healthy real servers with a weight
	// (what its quorum is measured against).
	Healthy int
	Quorum  int
	// Source is where the service was configured (formatted only when
	// shown: Compute runs on every sync).
	Source config.Pos

	// What the service's ipset members derive from (AppendMembers).
	SNAT         config.SNATMode
	SourceRanges []netip.Prefix
	// NodePort is set on the virtual servers of a NodePort-like service's
	// node addresses (not VIPs).
	NodePort bool
	// Method is the service's forwarding method (its destinations may mix
	// DR and tunnels): a DR or tunnel one's replies bypass the director,
	// so its VIP:port is NOTRACK and never masqueraded.
	Method lvs.Method
	// Adopt lets lbd take over a virtual server at this key that it did
	// not create (the service's adopt); without it such a one is foreign
	// and left alone.
	Adopt bool
	// Marked is what lbd marks for a firewall-mark virtual server; nil
	// for others, and for one whose packets the admin's rules mark.
	Marked *Marked
}

// Dest is one IPVS destination, in 48 bytes: a State holds one per real
// server of every service.
type Dest struct {
	Addr   netip.AddrPort
	Weight int
	// Real is the real server it comes from (immutable, like the
	// configuration): its weight, forwarding method and where it was
	// configured.
	Real *config.RealServer
}

// Forward is how IPVS reaches the destination: its real server's method;
// NAT without Real (a Dest built by hand).
func (d Dest) Forward() lvs.Forward {
	if d.Real == nil {
		return lvs.Forward{}
	}
	return d.Real.Forward
}

// ConfigWeight is the weight the configuration (or discovery) gives;
// Weight differs when health or quorum changed it. Without Real (a Dest
// built by hand), it is Weight.
func (d Dest) ConfigWeight() int {
	if d.Real == nil {
		return d.Weight
	}
	return d.Real.Weight
}

// Source is where the real server comes from: a file position, or a Pos
// whose File says "consul:NAME" or "sorry_server of NAME".
func (d Dest) Source() config.Pos {
	if d.Real == nil {
		return config.Pos{}
	}
	return d.Real.Pos
}

// same reports whether two destinations are alike in everything a State
// says of them.
func (d Dest) same(o Dest) bool {
	return d.Addr == o.Addr && d.Weight == o.Weight && d.Forward() == o.Forward() &&
		d.ConfigWeight() == o.ConfigWeight() && d.Source() == o.Source()
}

// Timeouts are IPVS's global connection timeouts; 0 keeps the kernel's.
type Timeouts struct {
	TCP, TCPFin, UDP time.Duration
}

// State is everything lbd wants in the kernel.
type State struct {
	Timeouts Timeouts
	Services []Service    // sorted by key
	VIPs     []netip.Addr // addresses to bind on the dummy interface, sorted
	// NodeAddrs are the box's addresses serving NodePort-like services.
	NodeAddrs []netip.Addr
	// Announce lists, per interface, the VIPs lbd answers ARP (IPv4) and
	// NDP (IPv6) for, and the floating addresses it holds there.
	Announce map[string][]netip.Addr
	// Standby lists, per interface, the addresses of Announce's kind this
	// box does not serve now (a failover pair's backup): the announcer
	// keeps their sockets ready, so that a takeover announces at once.
	Standby map[string][]netip.Addr
	// Floating are the failover addresses, held or not (Input.Floating).
	Floating []Floating
	// SyncDaemons are the IPVS connection-sync daemons to run: master and
	// backup at once with [ha.ipvs_sync], none without.
	SyncDaemons []syncd.Daemon
	// serving is Input.Serving: VIPs and Announce hold only what it
	// serves, and KeepRemoved keeps nothing else bound.
	serving Serving
	// sets holds what the ipset members derive from besides Services
	// (AppendMembers, SetEntries): members are not stored.
	sets setInputs
	// memo records, per lbd service, the inputs its destinations came
	// from, for the next Compute (Input.Prev) to skip it when they are the
	// same.
	memo          map[string]*destMemo
	healthVersion uint64
}

// destMemo is one service's destinations and the inputs they were
// computed from, compared by identity: configurations and discovered real
// servers are never modified once handed to Compute.
type destMemo struct {
	reals, discovered []config.RealServer
	quorum            int
	fallback          config.QuorumFallback
	onUnhealthy       config.OnUnhealthy
	sorry             netip.AddrPort // zero without a sorry server
	// checked is set when a real server has a health check: then health
	// must be the same version too.
	checked bool
	dests   []Dest
	healthy int
}

// sameSlice reports whether a and b are the very same slice.
func sameSlice(a, b []config.RealServer) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// lookupMemo returns prev's destinations of s when they were computed
// from the very same inputs.
func lookupMemo(prev *State, s *config.Service, discovered []config.RealServer, healthVersion uint64) *destMemo {
	if prev == nil {
		return nil
	}
	m := prev.memo[s.Name]
	if m == nil || !sameSlice(m.reals, s.RealServers) || !sameSlice(m.discovered, discovered) ||
		m.quorum != s.Quorum || m.fallback != s.QuorumFallback || m.onUnhealthy != s.OnUnhealthy ||
		m.sorry != sorryOf(s) || m.checked && (healthVersion == 0 || healthVersion != prev.healthVersion) {
		return nil
	}
	return m
}

func sorryOf(s *config.Service) netip.AddrPort {
	if s.SorryServer == nil {
		return netip.AddrPort{}
	}
	return *s.SorryServer
}

func checked(reals ...[]config.RealServer) bool {
	for _, rs := range reals {
		for i := range rs {
			if rs[i].HealthCheck != nil && rs[i].HealthCheck.Type != config.CheckNone {
				return true
			}
		}
	}
	return false
}

// Input is what Compute works from.
type Input struct {
	Config *config.Config
	// Discovered holds real servers found by discovery (Consul), by lbd
	// service name, in addition to the configured ones.
	Discovered map[string][]config.RealServer
	// DiscoveredServices are virtual services defined by discovery
	// (Consul), validated and free of conflicts with Config's services.
	DiscoveredServices []config.Service
	// Health holds known health results. A real server without an entry
	// gets its check's initial state (healthy with type "none").
	Health map[lvs.HealthKey]bool
	// HostAddrs are the box's own addresses (all interfaces): the node
	// addresses of NodePort-like services are chosen from them, and they
	// may always reach source-restricted services.
	HostAddrs []netip.Addr
	// Prev, when set, is an earlier result: a service whose destinations
	// come out the same shares Prev's slice instead of a new one, so that
	// a sync after a small change allocates little and appliers can skip
	// what did not change by identity. Prev is never modified.
	Prev *State
	// Serving says which VIPs this box binds and announces (VIPs,
	// Announce); the zero value serves all.
	Serving Serving
	// Floating are the failover pair's addresses on the box's own links.
	Floating []Floating
	// HealthVersion, when not 0, names Health: the caller promises that
	// equal versions mean equal health. With Prev, it lets Compute reuse the
	// destinations of services whose inputs are the very same (the same
	// real server slices, of an immutable configuration) without looking
	// at them again.
	HealthVersion uint64
}

// Compute returns the desired state for in.
func Compute(in Input) State {
	t := in.Config.IPVS
	st := State{Announce: map[string][]netip.Addr{}, Standby: map[string][]netip.Addr{},
		Timeouts: Timeouts{TCP: t.TCPTimeout, TCPFin: t.TCPFinTimeout, UDP: t.UDPTimeout}, serving: in.Serving}
	services := in.Config.Services
	if len(in.DiscoveredServices) > 0 {
		services = append(slices.Clip(services), in.DiscoveredServices...)
	}
	in.Serving = in.Serving.resolve(services)
	st.serving, st.Floating = in.Serving, in.Floating
	for _, f := range in.Floating {
		st.announce(f.Link, f.Prefix.Addr(), !f.Held)
	}
	st.SyncDaemons = syncDaemons(in.Config.IPVSSync)
	st.VIPs = vips(services, in.Prev, in.Serving)
	st.NodeAddrs = nodeAddrs(in.Config, in.HostAddrs, st.VIPs)
	st.sets = setInputs{hostAddrs: in.HostAddrs, localNets: in.Config.Dataplane.LocalNetworks, rsNets: in.Config.Dataplane.RealServerNetworks}
	// Sized once, not grown by doubling.
	st.Services = make([]Service, 0, virtualServers(services, len(st.NodeAddrs)))
	st.memo, st.healthVersion = make(map[string]*destMemo, len(services)), in.HealthVersion
	memos := make([]destMemo, 0, len(services)) // one allocation; never grows
	var scratch destScratch
	var hint int // where in Prev the next service probably is
	for i := range services {
		s := &services[i]
		if len(s.VIPs) == 0 && s.FWMark == 0 && (s.NodePort == 0 || len(st.NodeAddrs) == 0) {
			continue
		}
		discovered := in.Discovered[s.Name]
		if m := lookupMemo(in.Prev, s, discovered, in.HealthVersion); m != nil {
			memos = append(memos, *m)
		} else {
			dests, healthy := scratch.destinations(s, in)
			dests, hint = reuse(dests, in.Prev, s, hint)
			memos = append(memos, destMemo{reals: s.RealServers, discovered: discovered, quorum: s.Quorum, fallback: s.QuorumFallback,
				onUnhealthy: s.OnUnhealthy, sorry: sorryOf(s), checked: checked(s.RealServers, discovered), dests: dests, healthy: healthy})
		}
		m := &memos[len(memos)-1]
		st.memo[s.Name] = m
		dests, healthy := m.dests, m.healthy
		add := func(addr netip.Addr, port uint16, nodePort bool) {
			vs := virtualServer(s, addr, port, dests)
			vs.Healthy, vs.NodePort = healthy, nodePort
			st.Services = append(st.Services, vs)
		}
		for _, vip := range s.VIPs {
			if s.FWMark == 0 {
				add(vip, s.Port, false)
			}
			if s.Announce == config.AnnounceARP {
				st.announce(s.AnnounceInterface, vip, in.Serving.Serves(vip))
			}
		}
		if s.FWMark != 0 {
			st.Services = append(st.Services, markServer(s, dests, healthy))
		}
		if s.NodePort == 0 {
			continue
		}
		for _, a := range st.NodeAddrs {
			if family(a) == s.Family() {
				add(a, s.NodePort, true)
			}
		}
	}
	// Services usually come in key order already; checking is cheaper than
	// sorting 10,000 of them on every sync.
	byKey := func(a, b Service) int { return a.Key.Compare(b.Key) }
	if !slices.IsSortedFunc(st.Services, byKey) {
		slices.SortFunc(st.Services, byKey)
	}
	sortAddrs(st.Announce)
	sortAddrs(st.Standby)
	return st
}

// announce adds addr on iface to Announce when served, else to Standby.
func (st *State) announce(iface string, addr netip.Addr, served bool) {
	m := st.Standby
	if served {
		m = st.Announce
	}
	m[iface] = append(m[iface], addr)
}

// sortAddrs sorts and deduplicates each list of m.
func sortAddrs(m map[string][]netip.Addr) {
	for iface, as := range m {
		slices.SortFunc(as, netip.Addr.Compare)
		m[iface] = slices.Compact(as)
	}
}

// virtualServers counts the services' virtual servers: one per VIP, or
// one for a firewall-mark service, and one per node address of its
// family (at most nodeAddrs) for a node port.
func virtualServers(services []config.Service, nodeAddrs int) int {
	n := 0
	for i := range services {
		s := &services[i]
		if s.FWMark != 0 {
			n++
		} else {
			n += len(s.VIPs)
		}
		if s.NodePort != 0 {
			n += nodeAddrs
		}
	}
	return n
}

// vips returns the services' VIPs that serving serves, sorted and without
// duplicates; prev's slice when it holds the same.
func vips(services []config.Service, prev *State, serving Serving) []netip.Addr {
	var out []netip.Addr
	if prev != nil {
		out = make([]netip.Addr, 0, len(prev.VIPs))
	}
	for i := range services {
		out = append(out, services[i].VIPs...)
	}
	if !slices.IsSortedFunc(out, netip.Addr.Compare) {
		slices.SortFunc(out, netip.Addr.Compare)
	}
	out = serving.filter(slices.Compact(out))
	if prev != nil && slices.Equal(out, prev.VIPs) {
		return prev.VIPs
	}
	return slices.Clip(out)
}

// reuse returns prev's destinations of service s when they equal dests
// (a scratch slice), else a copy of dests. hint is where in prev.Services
// s is probably found (services tend to come in key order); reuse returns
// the next one.
func reuse(dests []Dest, prev *State, s *config.Service, hint int) ([]Dest, int) {
	if prev != nil {
		old, i := prev.lookupDests(s, hint)
		if old != nil && slices.EqualFunc(old, dests, Dest.same) {
			return old, i + 1
		}
		hint = i + 1
	}
	if len(dests) == 0 {
		return nil, hint
	}
	return slices.Clone(dests), hint
}

// lookupDests finds the destinations st gave service s, by the key of
// one of its virtual servers, trying Services[hint] first; nil when it
// had none. It also returns the index it looked at.
func (st *State) lookupDests(s *config.Service, hint int) ([]Dest, int) {
	var k lvs.Key
	switch {
	case s.FWMark != 0:
		k = markKey(s)
	case len(s.VIPs) > 0:
		k = lvs.Key{Addr: s.VIPs[0], Port: s.Port, Protocol: s.Protocol}
	default:
		i := slices.IndexFunc(st.NodeAddrs, func(a netip.Addr) bool { return family(a) == s.Family() })
		if i < 0 {
			return nil, hint
		}
		k = lvs.Key{Addr: st.NodeAddrs[i], Port: s.NodePort, Protocol: s.Protocol}
	}
	i, ok := hint, hint < len(st.Services) && st.Services[hint].Key == k
	if !ok {
		i, ok = slices.BinarySearchFunc(st.Services, k, func(v Service, k lvs.Key) int { return v.Key.Compare(k) })
	}
	if !ok || st.Services[i].Name != s.Name {
		return nil, hint
	}
	if s.FWMark != 0 {
		return st.Services[i].Dests, i
	}
	return st.Services[i].Dests, i + len(s.VIPs) - 1
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

func virtualServer(s *config.Service, vip netip.Addr, port uint16, dests []Dest) Service {
	v := Service{
		Key:          lvs.Key{Addr: vip, Port: port, Protocol: s.Protocol},
		Scheduler:    s.Scheduler,
		Dests:        dests,
		DrainTimeout: s.DrainTimeout,
		Name:         s.Name,
		Quorum:       s.Quorum,
		Source:       s.Pos,
		SNAT:         s.SNAT,
		SourceRanges: s.SourceRanges,
		Method:       s.Forward.Method,
		Adopt:        s.Adopt,
	}
	for _, f := range s.SchedulerFlags {
		v.Flags |= schedFlagBits[f]
	}
	// The kernel refuses an IPv6 virtual server without a netmask of
	// 1..128 even when it is not persistent; ipvsadm always sends one too.
	v.Netmask = 0xffffffff
	if vip.Is6() {
		v.Netmask = 128
	}
	if s.SessionAffinity {
		v.Flags |= FlagPersistent
		v.Timeout = uint32(s.SessionAffinityTimeout.Seconds())
	}
	return v
}

// destScratch holds the buffers destinations reuses from one service to
// the next: Compute runs on every sync over every service.
type destScratch struct {
	dests []Dest
	reals []*config.RealServer
	up    []bool
}

// destinations applies health, on_unhealthy and the quorum rules to the
// service's real servers; healthy counts the healthy ones with weight. The
// result is only valid until the next call.
func (sc *destScratch) destinations(s *config.Service, in Input) (_ []Dest, healthy int) {
	// Pointers, not copies: a RealServer carries its whole check.
	discovered := in.Discovered[s.Name]
	reals := sc.reals[:0]
	for i := range s.RealServers {
		reals = append(reals, &s.RealServers[i])
	}
	for i := range discovered {
		reals = append(reals, &discovered[i])
	}
	out := sc.dests[:0]
	up := sc.up[:0]
	for _, r := range reals {
		h := isHealthy(s.Name, r, in.Health)
		up = append(up, h)
		if h && r.Weight > 0 {
			healthy++
		}
	}
	sc.reals, sc.up = reals, up
	switch {
	case healthy >= s.Quorum || s.QuorumFallback == config.QuorumHealthy:
		for i, r := range reals {
			switch {
			case up[i]:
				out = append(out, dest(r, r.Weight))
			case s.OnUnhealthy == config.Drain:
				out = append(out, dest(r, 0))
			}
		}
	case s.QuorumFallback == config.QuorumSorry && s.SorryServer != nil:
		// Real servers stay at weight 0 so that established connections
		// finish and they come back without a delete and re-add.
		for _, r := range reals {
			out = append(out, dest(r, 0))
		}
		// The sorry server is forwarded to as the service is (keepalived's
		// too): a NAT one would mix NAT into a DR service.
		sorry := &config.RealServer{Address: s.SorryServer.Addr(), Port: s.SorryServer.Port(), Forward: s.Forward, Weight: 1, Pos: config.Pos{File: "sorry_server of " + s.Name}}
		out = append(out, Dest{Addr: *s.SorryServer, Weight: 1, Real: sorry})
	default: // QuorumKeep: the checks are more likely wrong than every server
		for _, r := range reals {
			out = append(out, dest(r, r.Weight))
		}
	}
	sc.dests = out
	byAddr := func(a, b Dest) int { return a.Addr.Compare(b.Addr) }
	if !slices.IsSortedFunc(out, byAddr) {
		slices.SortStableFunc(out, byAddr)
	}
	// A sorry server may also be a real server: keep one entry, the
	// real server's.
	return slices.CompactFunc(out, func(a, b Dest) bool { return a.Addr == b.Addr }), healthy
}

func dest(r *config.RealServer, weight int) Dest {
	return Dest{Addr: r.AddrPort(), Weight: weight, Real: r}
}

func isHealthy(service string, r *config.RealServer, health map[lvs.HealthKey]bool) bool {
	if r.Down {
		return false
	}
	if r.HealthCheck.Type == config.CheckNone {
		return true
	}
	if h, ok := health[lvs.HealthKey{Service: service, Addr: r.AddrPort()}]; ok {
		return h
	}
	return r.HealthCheck.InitialHealthy
}
