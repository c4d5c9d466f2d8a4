package realserver

import (
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// loopback is the interface the VIPs go on.
const loopback = "lo"

// Link is one network interface as the checks need it.
type Link struct {
	Name     string
	Up       bool
	Loopback bool
	NoARP    bool // IFF_NOARP: tunnels, lo; never answers ARP itself
}

// Addr is an address bound on a link.
type Addr struct {
	Link   string
	Prefix netip.Prefix
}

// FouPort is a foo-over-UDP receive port.
type FouPort struct {
	Port uint16
	V6   bool // bound for IPv6 outer packets
	GUE  bool // GUE, not direct encapsulation
}

// State is a snapshot of what the checks look at.
type State struct {
	Links []Link
	Addrs []Addr
	Fou   []FouPort
	// Sysctls holds the values under /proc/sys, keyed by path
	// ("net/ipv4/conf/all/arp_ignore"): for all and every link, the keys
	// StateKeys names. A key the kernel does not have is absent.
	Sysctls map[string]string
}

// Knobs are the per-interface IPv4 sysctls the checks read.
func Knobs() []string { return []string{"arp_ignore", "arp_announce", "rp_filter"} }

// StateKeys are the sysctl paths a State needs for these links.
func StateKeys(links []Link) []string {
	names := []string{"all"}
	for _, l := range links {
		names = append(names, l.Name)
	}
	var keys []string
	for _, n := range names {
		for _, k := range Knobs() {
			keys = append(keys, confKey(n, k))
		}
	}
	return append(keys, fbTunnelsKey)
}

// fbTunnelsKey, when not 0, keeps the kernel from making the fallback
// tunnel devices in namespaces other than the first.
const fbTunnelsKey = "net/core/fb_tunnels_only_for_init_net"

func confKey(link, knob string) string { return path.Join("net/ipv4/conf", link, knob) }

func (st State) link(name string) (Link, bool) {
	for _, l := range st.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// sysctl returns a key's value as a number.
func (st State) sysctl(key string) (int, bool) {
	s, ok := st.Sysctls[key]
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	return n, err == nil
}

// bound lists the links that hold a.
func (st State) bound(a netip.Addr) []Addr {
	var out []Addr
	for _, b := range st.Addrs {
		if b.Prefix.Addr() == a {
			out = append(out, b)
		}
	}
	return out
}

func (st State) hasFou(port uint16, v6 bool) (FouPort, bool) {
	for _, f := range st.Fou {
		if f.Port == port && f.V6 == v6 {
			return f, true
		}
	}
	return FouPort{}, false
}
