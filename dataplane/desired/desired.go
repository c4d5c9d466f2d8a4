// Package desired computes the complete kernel state lbd wants from the
// configuration, discovered real servers and their health. It is a pure
// function: no kernel, no clock, no I/O, so that `lbd plan` and the sync
// runner agree by construction and the logic is table-tested directly.
package desired

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/lbdproject/lbd/config"
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

// Key identifies an IPVS virtual server.
type Key struct {
	Addr     netip.Addr
	Port     uint16
	Protocol config.Protocol
}

func (k Key) String() string {
	return fmt.Sprintf("%s/%s", netip.AddrPortFrom(k.Addr, k.Port), k.Protocol)
}

// Compare orders keys by address, port, then protocol.
func (k Key) Compare(o Key) int {
	return cmp.Or(k.Addr.Compare(o.Addr), cmp.Compare(k.Port, o.Port), cmp.Compare(k.Protocol, o.Protocol))
}

// Service is one IPVS virtual server with its destinations.
type Service struct {
	Key       Key
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
}

// Dest is one IPVS destination (always NAT/masquerading).
type Dest struct {
	Addr   netip.AddrPort
	Weight int
	// ConfigWeight is the weight the configuration gives; Weight differs
	// when health or quorum changed it.
	ConfigWeight int
	// Source is where the real server comes from: a file position, or a
	// Pos whose File says "consul:NAME" or "sorry_server of NAME".
	Source config.Pos
}

// State is everything lbd wants in the kernel.
type State struct {
	Services []Service    // sorted by key
	VIPs     []netip.Addr // addresses to bind on the dummy interface, sorted
	// NodeAddrs are the box's addresses serving NodePort-like services.
	NodeAddrs []netip.Addr
	// Sets holds every lbd ipset (all of SetSpecs) with its entries, in no
	// particular order.
	Sets map[string][]SetEntry
	// Announce lists, per interface, the IPv4 VIPs lbd answers ARP for.
	Announce map[string][]netip.Addr
}

// HealthKey identifies one real server of one service for health.
type HealthKey struct {
	Service string
	Addr    netip.AddrPort
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
	Health map[HealthKey]bool
	// HostAddrs are the box's own addresses (all interfaces): the node
	// addresses of NodePort-like services are chosen from them, and they
	// may always reach source-restricted services.
	HostAddrs []netip.Addr
}

// Compute returns the desired state for in.
func Compute(in Input) State {
	st := State{Announce: map[string][]netip.Addr{}}
	services := in.Config.Services
	if len(in.DiscoveredServices) > 0 {
		services = append(slices.Clip(services), in.DiscoveredServices...)
	}
	vips := map[netip.Addr]bool{}
	for i := range services {
		for _, vip := range services[i].VIPs {
			vips[vip] = true
		}
	}
	st.NodeAddrs = nodeAddrs(in.Config, in.HostAddrs, vips)
	for i := range services {
		s := &services[i]
		dests, healthy := destinations(s, in)
		for _, vip := range s.VIPs {
			vs := virtualServer(s, vip, s.Port, dests)
			vs.Healthy = healthy
			st.Services = append(st.Services, vs)
			if s.Announce == config.AnnounceARP && vip.Is4() {
				st.Announce[s.AnnounceInterface] = append(st.Announce[s.AnnounceInterface], vip)
			}
		}
		if s.NodePort == 0 {
			continue
		}
		for _, a := range st.NodeAddrs {
			if family(a) == s.Family() {
				vs := virtualServer(s, a, s.NodePort, dests)
				vs.Healthy = healthy
				st.Services = append(st.Services, vs)
			}
		}
	}
	slices.SortFunc(st.Services, func(a, b Service) int { return a.Key.Compare(b.Key) })
	for v := range vips {
		st.VIPs = append(st.VIPs, v)
	}
	slices.SortFunc(st.VIPs, netip.Addr.Compare)
	for iface, as := range st.Announce {
		slices.SortFunc(as, netip.Addr.Compare)
		st.Announce[iface] = slices.Compact(as)
	}
	st.Sets = filterSets(in.Config, services, &st, in.HostAddrs)
	return st
}

func family(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

func virtualServer(s *config.Service, vip netip.Addr, port uint16, dests []Dest) Service {
	v := Service{
		Key:          Key{Addr: vip, Port: port, Protocol: s.Protocol},
		Scheduler:    s.Scheduler,
		Dests:        dests,
		DrainTimeout: s.DrainTimeout,
		Name:         s.Name,
		Quorum:       s.Quorum,
		Source:       s.Pos,
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

// destinations applies health, on_unhealthy and the quorum rules to the
// service's real servers; healthy counts the healthy ones with weight.
func destinations(s *config.Service, in Input) (_ []Dest, healthy int) {
	// Pointers, not copies: a RealServer carries its whole check, and
	// this runs for every real server on every sync.
	discovered := in.Discovered[s.Name]
	reals := make([]*config.RealServer, 0, len(s.RealServers)+len(discovered))
	for i := range s.RealServers {
		reals = append(reals, &s.RealServers[i])
	}
	for i := range discovered {
		reals = append(reals, &discovered[i])
	}
	out := make([]Dest, 0, len(reals)+1)
	up := make([]bool, len(reals))
	for i, r := range reals {
		up[i] = isHealthy(s.Name, r, in.Health)
		if up[i] && r.Weight > 0 {
			healthy++
		}
	}
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
		out = append(out, Dest{Addr: *s.SorryServer, Weight: 1, ConfigWeight: 1, Source: config.Pos{File: "sorry_server of " + s.Name}})
	default: // QuorumKeep: the checks are more likely wrong than every server
		for _, r := range reals {
			out = append(out, dest(r, r.Weight))
		}
	}
	slices.SortStableFunc(out, func(a, b Dest) int { return a.Addr.Compare(b.Addr) })
	// A sorry server may also be a real server: keep one entry, the
	// real server's.
	return slices.CompactFunc(out, func(a, b Dest) bool { return a.Addr == b.Addr }), healthy
}

func dest(r *config.RealServer, weight int) Dest {
	return Dest{Addr: r.AddrPort(), Weight: weight, ConfigWeight: r.Weight, Source: r.Pos}
}

func isHealthy(service string, r *config.RealServer, health map[HealthKey]bool) bool {
	if r.Down {
		return false
	}
	if r.HealthCheck.Type == config.CheckNone {
		return true
	}
	if h, ok := health[HealthKey{service, r.AddrPort()}]; ok {
		return h
	}
	return r.HealthCheck.InitialHealthy
}
