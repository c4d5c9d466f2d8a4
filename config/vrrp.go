package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"time"
)

// VRRP failover: [[vrrp]] instances (keepalived's vrrp_instance) and
// [[vrrp_sync_group]]s (vrrp_sync_group), main file only. The keys keep
// keepalived's meaning so that an lbd box can pair with an unchanged
// keepalived box; where lbd's default differs (version, preempt), the
// reference says why.

// Defaults of a [[vrrp]] instance, documented in docs/config-reference.md.
const (
	defaultVRRPVersion  = 3
	defaultVRRPPriority = 100
	defaultAdvertV3     = 200 * time.Millisecond
	defaultAdvertV2     = time.Second
	defaultGARPRepeat   = 5               // keepalived's
	defaultGARPDelay    = 5 * time.Second // keepalived's
	defaultTrackSyncs   = 3

	// maxAdvertV3 is the largest VRRPv3 interval: 12 bits of centiseconds.
	maxAdvertV3 = 4095 * 10 * time.Millisecond
	// maxAuthPass is what a VRRPv2 advert carries of a password;
	// keepalived silently cuts a longer one.
	maxAuthPass = 8
)

var vrrpName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// VRRPInstance is one [[vrrp]] table: a virtual router whose addresses
// (and carried services' VIPs) are bound on this box while it is master.
type VRRPInstance struct {
	Name      string
	Interface string // adverts are sent and received here
	VRID      uint8
	Version   int // 2 or 3
	Priority  uint8
	// AdvertInterval is whole centiseconds (version 3) or whole seconds
	// (version 2).
	AdvertInterval time.Duration
	// Preempt lets a higher priority take over from a running master;
	// lbd's default is false (keepalived's nopreempt).
	Preempt      bool
	PreemptDelay time.Duration
	// UnicastPeers, when set, replace the multicast group: adverts go to
	// them, and only theirs are accepted.
	UnicastPeers  []netip.Addr
	UnicastSource netip.Addr // zero: the kernel's choice
	// AuthPass is the VRRPv2 PASS password; empty means no authentication.
	AuthPass Password
	// Addresses are what adverts carry; ExcludedAddresses are bound while
	// master but not advertised.
	Addresses, ExcludedAddresses []VRRPAddress
	// Services are the services whose VIPs move with the instance;
	// AllServices (services = ["*"]) means every service, Consul-defined
	// ones included, and leaves Services empty.
	Services    []string
	AllServices bool
	// TrackInterfaces put the instance in FAULT while one is down.
	TrackInterfaces []string
	// TrackSyncs puts the instance in FAULT after that many dataplane
	// syncs failed in a row (0: never): a box that cannot program its
	// kernel should not hold the addresses.
	TrackSyncs int
	// TrackServices put the instance in FAULT while one of them has fewer
	// healthy real servers than its quorum.
	TrackServices []string
	GARPRepeat    int           // gratuitous ARP / NA burst on becoming master
	GARPDelay     time.Duration // repeat the burst once after this; 0 never
	Notify        Notify
	Pos           Pos

	prov provenance
	// The key of each of Services, Addresses, ExcludedAddresses (an
	// element refused where it is decoded has none).
	serviceKeys, addressKeys, excludedKeys []string
	trackServiceKeys                       []string
}

// VRRPAddress is one address of an instance: ADDR/LEN on Interface (the
// instance's interface unless the address says "dev IFNAME"). Prefix keeps
// the host bits: it is the address.
type VRRPAddress struct {
	Prefix    netip.Prefix
	Interface string
}

// String renders the address as written in the configuration.
func (a VRRPAddress) String() string { return a.Prefix.String() + " dev " + a.Interface }

// VRRPSyncGroup is one [[vrrp_sync_group]]: instances that change state
// together.
type VRRPSyncGroup struct {
	Name      string
	Instances []string
	Notify    Notify
	Pos       Pos

	prov         provenance
	instanceKeys []string
}

// Notify holds the programs run on state transitions (absolute paths;
// empty: none). Any runs on every transition with the arguments TYPE NAME
// STATE PRIORITY, keepalived's notify; the others on one state each.
type Notify struct {
	Any, Master, Backup, Fault, Stop string
}

// notifyKeys names Notify's fields by key, in the order they are decoded.
func (n *Notify) notifyKeys() []struct {
	key string
	dst *string
} {
	return []struct {
		key string
		dst *string
	}{{"notify", &n.Any}, {"notify_master", &n.Master}, {"notify_backup", &n.Backup},
		{"notify_fault", &n.Fault}, {"notify_stop", &n.Stop}}
}

// Password is a secret of the configuration. It formats as asterisks
// (with %v, %s, %q, %#v, in JSON and text encodings), so that a log line
// or a status answer that prints a configuration never shows it;
// string(p) is the password.
type Password string

const redacted = "********"

func (p Password) String() string {
	if p == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the password.
func (p Password) GoString() string { return fmt.Sprintf("%q", p.String()) }

// MarshalText keeps encoders from printing the password.
func (p Password) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// provenance locates the keys of a table that checks across tables point
// at.
type provenance struct {
	path string
	pos  map[string]Pos // by key relative to the table
}

func (p *provenance) keep(n *node, key string) {
	if p.pos == nil {
		p.pos = map[string]Pos{}
	}
	p.pos[key] = n.pos(key)
}

// at returns where key is, or fallback (the table).
func (p *provenance) at(key string, fallback Pos) Pos {
	if q, ok := p.pos[key]; ok {
		return q
	}
	return fallback
}

func (p *provenance) keyPath(key string) string {
	if key == "" {
		return p.path
	}
	return p.path + "." + key
}

// Family returns 4 or 6: the family of the instance's adverts, that of its
// addresses, else of its unicast peers, else IPv4 (as keepalived).
func (v *VRRPInstance) Family() int {
	for _, a := range v.Addresses {
		return family(a.Prefix.Addr())
	}
	for _, p := range v.UnicastPeers {
		return family(p)
	}
	return 4
}

// VRRPCarrier returns the instance that carries service's VIPs: the one
// that names it in services, or the one with services = ["*"] (which
// carries every service, Consul-defined ones included).
func (c *Config) VRRPCarrier(service string) (instance string, ok bool) {
	all := ""
	for i := range c.VRRP {
		v := &c.VRRP[i]
		if slices.Contains(v.Services, service) {
			return v.Name, true
		}
		if v.AllServices && all == "" {
			all = v.Name
		}
	}
	return all, all != ""
}

// Same reports whether two instances are configured alike, wherever they
// are in the file.
func (v *VRRPInstance) Same(o *VRRPInstance) bool {
	a, b := *v, *o
	for _, x := range []*VRRPInstance{&a, &b} {
		x.Pos, x.prov, x.serviceKeys, x.addressKeys, x.excludedKeys, x.trackServiceKeys = Pos{}, provenance{}, nil, nil, nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// Same reports whether two sync groups are configured alike, wherever they
// are in the file.
func (g *VRRPSyncGroup) Same(o *VRRPSyncGroup) bool {
	a, b := *g, *o
	for _, x := range []*VRRPSyncGroup{&a, &b} {
		x.Pos, x.prov, x.instanceKeys = Pos{}, provenance{}, nil
	}
	return reflect.DeepEqual(a, b)
}
