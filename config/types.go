// Package config is lbd's configuration model: the TOML schema admins edit,
// its strict validation, and the merge of lbd.toml with conf.d/*.toml into
// one immutable snapshot.
package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

// Default locations of the configuration.
const (
	DefaultPath    = "/etc/lbd/lbd.toml"
	DefaultConfDir = "conf.d" // relative to the main file's directory
)

// Pos locates a key in a configuration file, for error messages and for the
// provenance that real servers and services carry into logs and status.
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) String() string {
	switch {
	case p.File == "":
		return "<unknown>"
	case p.Line == 0:
		return p.File
	case p.Col == 0:
		return fmt.Sprintf("%s:%d", p.File, p.Line)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Config is one complete, validated configuration snapshot. It is never
// mutated after Load returns it.
type Config struct {
	Sync      Sync
	Dataplane Dataplane
	IPVS      IPVS
	Status    Status
	Consul    Consul
	Services  []Service

	// VRRP and VRRPSyncGroups are the main file's [[vrrp]] and
	// [[vrrp_sync_group]] tables (see vrrp.go).
	VRRP           []VRRPInstance
	VRRPSyncGroups []VRRPSyncGroup
	// IPVSSync is [ha.ipvs_sync] (see ha.go).
	IPVSSync IPVSSync
	// Conntrackd is [ha.conntrackd] (see conntrackd.go).
	Conntrackd Conntrackd

	// Files lists every file the snapshot was read from, main file first.
	Files []string

	// refPos locates the keys that name files (token_file, ca_file ...,
	// each exec check's command, the VRRP notify programs) by key path,
	// for CheckFiles.
	refPos map[string]Pos
}

// Sync holds the bounded-frequency runner's timings and the safety valve.
type Sync struct {
	// MinSyncPeriod is the shortest time between two syncs.
	MinSyncPeriod time.Duration
	// SyncPeriod is the longest time between two syncs; each periodic sync
	// is a full reconcile against a kernel dump.
	SyncPeriod time.Duration
	// Burst is how many syncs may run back to back before MinSyncPeriod
	// applies.
	Burst int
	// MaxDeleteFraction holds a sync that would delete more than this share
	// of services or real servers at once, unless an admin's edit asked
	// for it.
	MaxDeleteFraction float64
}

// Dataplane holds settings of the kernel objects lbd owns.
type Dataplane struct {
	// Interface is the dummy link that carries the VIPs.
	Interface string
	// MasqueradeBit is the fwmark bit that asks POSTROUTING to MASQUERADE.
	MasqueradeBit int
	// LocalNetworks are the networks whose clients need no SNAT: with
	// snat = "auto", traffic from outside them is masqueraded (kube-proxy's
	// cluster-CIDR semantics).
	LocalNetworks []netip.Prefix
	// RealServerNetworks are the real servers' networks. Traffic from them
	// to a service is always masqueraded, so that real server A -> VIP ->
	// real server B on one flat network gets its replies through the
	// director. Empty means the real servers' own addresses.
	RealServerNetworks []netip.Prefix
	// StrictARP keeps the kernel from answering ARP for VIPs on other links.
	StrictARP bool
	// NodeCIDRs select which of the box's addresses serve NodePort-like
	// services. Empty means none: such services are refused.
	NodeCIDRs []netip.Prefix
	// NodePortMin and NodePortMax bound node_port values.
	NodePortMin, NodePortMax uint16
}

// MasqueradeMark returns the fwmark value of MasqueradeBit (14 → 0x4000).
func (d Dataplane) MasqueradeMark() uint32 { return 1 << uint(d.MasqueradeBit) }

// IPVS holds the kernel's global IPVS connection timeouts; zero leaves the
// kernel's value alone.
type IPVS struct {
	TCPTimeout    time.Duration
	TCPFinTimeout time.Duration
	UDPTimeout    time.Duration
}

// Status holds where lbd answers `lbd status` and serves metrics.
type Status struct {
	Socket        string
	MetricsListen string // host:port; empty disables the metrics listener
	// RealServerMetrics adds per-real-server connection gauges (one series
	// per real server: opt-in, as they grow with the configuration).
	RealServerMetrics bool
}

// Consul holds the agent lbd talks to. Enabled is true when the [consul]
// table is present or any service names a Consul service.
type Consul struct {
	Enabled    bool
	Address    string
	Scheme     string
	Datacenter string
	TokenFile  string
	TLS        ConsulTLS
	// VirtualServices turns Consul services into virtual services.
	VirtualServices ConsulVirtualServices
}

// ConsulVirtualServices says which Consul services define virtual services
// and which VIPs they may claim.
type ConsulVirtualServices struct {
	// Tag marks the Consul services that define a virtual service in their
	// lbd-* service meta; empty disables Consul-defined virtual services.
	Tag string
	// VIPPools are the only networks a Consul-defined VIP may come from:
	// Consul registrations are not trusted to claim any address.
	VIPPools []netip.Prefix
	// RealServerNetworks are the only networks a real server from Consul
	// may live in (real_server_networks); empty allows any address outside
	// the forbidden set. Required with a Tag.
	RealServerNetworks []netip.Prefix
}

// ConsulTLS configures TLS to the Consul agent.
type ConsulTLS struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	ServerName         string
	InsecureSkipVerify bool
}

// SNATMode chooses whether the client's address is hidden from real servers.
type SNATMode string

const (
	// SNATAuto masquerades traffic whose source is outside LocalNetworks
	// (kube-proxy's semantics).
	SNATAuto SNATMode = "auto"
	// SNATAlways masquerades all traffic (kube-proxy's masquerade_all).
	SNATAlways SNATMode = "always"
	// SNATNever keeps the client's address; real servers must route back
	// through the director.
	SNATNever SNATMode = "never"
)

// Announce chooses how a service's VIPs reach the network.
type Announce string

const (
	// AnnounceRoute: the VIP lives on the dummy link and the upstream router
	// routes it to the director.
	AnnounceRoute Announce = "route"
	// AnnounceARP: lbd answers ARP (IPv6: neighbour solicitations) for the
	// VIP on AnnounceInterface and sends gratuitous ARP (unsolicited
	// neighbour advertisements) when it starts serving it.
	AnnounceARP Announce = "arp"
)

// OnUnhealthy chooses what happens to a real server that fails its checks.
type OnUnhealthy string

const (
	// Drain sets its weight to 0: established connections finish.
	Drain OnUnhealthy = "drain"
	// Remove deletes it from IPVS.
	Remove OnUnhealthy = "remove"
)

// QuorumFallback chooses what a service does below its quorum.
type QuorumFallback string

const (
	// QuorumHealthy serves whichever real servers are healthy; with none,
	// new connections are rejected.
	QuorumHealthy QuorumFallback = "healthy"
	// QuorumSorry serves only the sorry server.
	QuorumSorry QuorumFallback = "sorry"
	// QuorumKeep keeps the real servers the service had when it fell below
	// quorum, on the theory that the checks, not the servers, are failing.
	QuorumKeep QuorumFallback = "keep"
)

// Service is a virtual service: one or more VIPs sharing a port, protocol,
// scheduler and set of real servers. Each VIP becomes one IPVS virtual
// server; a firewall-mark service is one virtual server in all.
type Service struct {
	Name     string
	VIPs     []netip.Addr
	Port     uint16 // 0 when the service has only a NodePort, or a firewall mark
	Protocol lvs.Protocol
	// NodePort makes the service reachable at every node address on this
	// port (NodePort-like); 0 disables it.
	NodePort uint16
	// FWMark keys the service by a firewall mark instead of VIP:port
	// (keepalived's virtual_server fwmark): one IPVS virtual server of
	// the service's family takes the packets whose whole mark is FWMark.
	// 0 for a VIP:port service.
	FWMark uint32
	// MarkPorts are the ports (of Protocol) that lbd marks with FWMark on
	// each of VIPs; none when the admin's own rules mark the packets
	// (then the service has no VIPs either).
	MarkPorts []PortRange

	Scheduler      string
	SchedulerFlags []string

	// SessionAffinity enables client-IP persistence for
	// SessionAffinityTimeout.
	SessionAffinity        bool
	SessionAffinityTimeout time.Duration

	SourceRanges []netip.Prefix
	SNAT         SNATMode
	// Forward is the service's forwarding method (keepalived's lb_kind),
	// which its real servers, its sorry server and those from Consul
	// take unless a real server sets its own: NAT (the zero value), or
	// DR and tunnels, never NAT with either.
	Forward lvs.Forward

	Announce          Announce
	AnnounceInterface string

	RealServers []RealServer
	Consul      *ConsulService // real servers from a Consul service
	// Register, when set, registers the service's VIPs into Consul.
	Register *ConsulRegister

	// HealthCheck is the service's check, shared with its real servers
	// that do not override it; never modify through it.
	HealthCheck *HealthCheck
	OnUnhealthy OnUnhealthy
	// DrainTimeout bounds how long a removed real server keeps weight 0
	// before it is deleted even with connections left.
	DrainTimeout time.Duration

	// Adopt lets lbd take over IPVS virtual servers of this service that
	// it did not create (a keepalived's, say): without it lbd leaves such
	// a one alone and reports it. Files only: Consul may not adopt.
	Adopt bool

	// Quorum is the least number of healthy real servers the service
	// needs; below it QuorumFallback applies.
	Quorum         int
	QuorumFallback QuorumFallback
	SorryServer    *netip.AddrPort

	// Pos is where the service's table starts: its provenance.
	Pos Pos
	// path and the positions below locate the keys that checks across
	// services point at: name, node_port (when set) and each of vips.
	path                                      string
	namePos, nodePortPos, sorryPos, fwmarkPos Pos
	vipPos                                    []Pos
	vipKeys                                   []string // vips[i] of each of VIPs
	// family is a firewall-mark service's written family (4 or 6), 0
	// when its VIPs or real servers tell it.
	family int
}

// at returns the position of one of the keys "name", "node_port" and
// those of VIPs (vipKey), as recorded when the service was decoded, or of
// the service.
func (s *Service) at(key string) Pos {
	var p Pos
	switch {
	case key == "name":
		p = s.namePos
	case key == "node_port":
		p = s.nodePortPos
	case key == "fwmark":
		p = s.fwmarkPos
	default:
		if i := slices.Index(s.vipKeys, key); i >= 0 && i < len(s.vipPos) {
			p = s.vipPos[i]
		}
	}
	if p == (Pos{}) {
		return s.Pos
	}
	return p
}

// vipKey is the key of VIPs[i]: vips[i], unless an element before it was
// refused.
func (s *Service) vipKey(i int) string {
	if i < len(s.vipKeys) {
		return s.vipKeys[i]
	}
	return "vips[" + strconv.Itoa(i) + "]"
}

// Family returns 4 or 6: the address family of the service's VIPs, or of
// its real servers for a NodePort-only service (a firewall-mark one's
// written family first).
func (s *Service) Family() int {
	if f := s.knownFamily(); f != 0 {
		return f
	}
	return 4
}

// knownFamily is Family, or 0 while nothing tells it yet.
func (s *Service) knownFamily() int {
	if s.family != 0 {
		return s.family
	}
	for _, v := range s.VIPs {
		return family(v)
	}
	for _, rs := range s.RealServers {
		if rs.Address.IsValid() {
			return family(rs.Address)
		}
	}
	return 0
}

func family(a netip.Addr) int {
	if a.Is4() || a.Is4In6() {
		return 4
	}
	return 6
}

// RealServer is a statically configured real server.
type RealServer struct {
	Address netip.Addr
	Port    uint16
	// Forward is how IPVS reaches it (in Port's padding: no extra bytes):
	// its service's method, or its own forward and tunnel keys.
	Forward lvs.Forward
	Weight  int
	// HealthCheck is the service's check with this real server's overrides
	// applied; never nil once decoded. Real servers without overrides share
	// one copy of their service's check: shared between real servers; never
	// modify through it (copy the pointee and point at the copy instead).
	HealthCheck *HealthCheck
	// Down is set when the real server's source reports it unhealthy (a
	// Consul check in warning or critical); lbd's own check applies on top.
	Down bool
	Pos  Pos
}

// AddrPort returns the real server's address and port.
func (r RealServer) AddrPort() netip.AddrPort { return netip.AddrPortFrom(r.Address, r.Port) }

// ConsulService names the Consul service whose instances become real servers.
type ConsulService struct {
	Service       string
	Tags          []string
	Datacenter    string
	Port          uint16 // overrides the registered port when non-zero
	WeightMeta    string // service meta key holding the weight
	DefaultWeight int
	PassingOnly   bool
	// OwnChecks is set when the service has a [service.health_check]
	// table: lbd then checks Consul's instances too, on top of Consul's
	// own health. Without it, Consul's health alone decides.
	OwnChecks bool
	Pos       Pos
}

// ConsulRegister registers a service's VIPs into Consul, one Consul
// service instance per VIP, healthy while the service meets its quorum.
type ConsulRegister struct {
	Name string // Consul service name; the lbd service's name by default
	Tags []string
	Pos  Pos
}

// CheckType names a health checker.
type CheckType string

const (
	CheckNone  CheckType = "none"
	CheckTCP   CheckType = "tcp"
	CheckHTTP  CheckType = "http"
	CheckHTTPS CheckType = "https"
	CheckUDP   CheckType = "udp"
	CheckDNS   CheckType = "dns"
	CheckExec  CheckType = "exec"
	// CheckSCTP sets up an SCTP association and aborts it: SCTP's TCP
	// connect.
	CheckSCTP CheckType = "sctp"
)

// HealthCheck defines how real servers are checked.
type HealthCheck struct {
	Type     CheckType
	Interval time.Duration
	Timeout  time.Duration
	Rise     int
	Fall     int
	// InitialHealthy is the state of a newly configured real server.
	InitialHealthy bool
	// Port overrides the real server's port for the check; 0 uses it.
	Port uint16
	// SourceAddress is the local address checks are sent from; zero lets
	// the kernel choose.
	SourceAddress netip.Addr

	// http, https
	Path          string
	Host          string
	ExpectStatus  []StatusRange
	ExpectBody    string
	TLSServerName string
	TLSVerify     bool

	// udp
	Payload []byte
	Expect  []byte

	// dns
	QueryName    string
	QueryType    string
	ExpectRcode  string
	ExpectAnswer string

	// exec
	Command []string
	User    string

	Pos Pos
}

// StatusRange is an inclusive range of HTTP status codes.
type StatusRange struct{ Min, Max int }

// Contains reports whether code is in the range.
func (r StatusRange) Contains(code int) bool { return code >= r.Min && code <= r.Max }

// Same reports whether two services are configured alike, whatever their
// place in the files: what a reload changed is what is not Same.
func (s *Service) Same(o *Service) bool {
	a, b := s.withoutProvenance(), o.withoutProvenance()
	return reflect.DeepEqual(a, b)
}

func (s *Service) withoutProvenance() Service {
	c := *s
	c.Pos, c.path, c.namePos, c.nodePortPos, c.sorryPos, c.fwmarkPos, c.vipPos, c.vipKeys = Pos{}, "", Pos{}, Pos{}, Pos{}, Pos{}, nil, nil
	// The service and its real servers share checks: clear each distinct
	// one once.
	checks := map[*HealthCheck]*HealthCheck{}
	clean := func(hc *HealthCheck) *HealthCheck {
		if hc == nil {
			return nil
		}
		if c, ok := checks[hc]; ok {
			return c
		}
		cp := *hc
		cp.Pos = Pos{}
		checks[hc] = &cp
		return &cp
	}
	c.HealthCheck = clean(s.HealthCheck)
	c.RealServers = slices.Clone(s.RealServers)
	for i := range c.RealServers {
		r := &c.RealServers[i]
		r.Pos = Pos{}
		r.HealthCheck = clean(r.HealthCheck)
	}
	if s.Consul != nil {
		cs := *s.Consul
		cs.Pos = Pos{}
		c.Consul = &cs
	}
	if s.Register != nil {
		r := *s.Register
		r.Pos = Pos{}
		c.Register = &r
	}
	return c
}
