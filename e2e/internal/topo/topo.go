// Package topo builds, inside network namespaces, the little network an lbd
// end-to-end test needs, and runs the programs on its hosts:
//
//	client1..N ──[clients]── router ──[frontend]── dir1 (dir2) ──[backend]── rs1..N
//	198.18.1.0/24                      198.18.2.0/24               198.18.3.0/24
//
// Every host is a network namespace; each segment is a bridge in one more
// namespace (the switch), so hosts can be added to any segment later (a
// second director, a Consul agent). The router routes the VIP prefix
// (198.18.100.0/24) to the first director; the real servers' default route
// goes back through it, as IPVS NAT needs. Addresses are from 198.18.0.0/15,
// the range set aside for network benchmark tests (RFC 2544).
//
// Everything is named with a prefix unique to the topology and removed when
// the test ends. The package is meant for e2e tests only (it is internal to
// e2e/) and needs root and iproute2.
package topo

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Address plan. Host numbers: routers and directors take low numbers on
// each segment, other hosts start at hostBase.
var (
	ClientsPrefix  = netip.MustParsePrefix("198.18.1.0/24")
	FrontendPrefix = netip.MustParsePrefix("198.18.2.0/24")
	BackendPrefix  = netip.MustParsePrefix("198.18.3.0/24")
	// VIPPrefix is routed by the router to the first director.
	VIPPrefix = netip.MustParsePrefix("198.18.100.0/24")

	// IPv6 twins of the above, from 2001:2::/48 (RFC 5180, benchmarking):
	// every segment is dual-stack.
	ClientsPrefix6  = netip.MustParsePrefix("2001:2:0:1::/64")
	FrontendPrefix6 = netip.MustParsePrefix("2001:2:0:2::/64")
	BackendPrefix6  = netip.MustParsePrefix("2001:2:0:3::/64")
	VIPPrefix6      = netip.MustParsePrefix("2001:2:0:100::/64")
)

const hostBase = 11

// VIPLink is the dummy link on a director that carries the VIPs.
const VIPLink = "lbd0"

// Default ports of the backends that StartBackends starts.
const (
	BackendHTTPPort = 80
	BackendUDPPort  = 53
	// BackendPushPort serves server-first connections: the real server
	// writes a line every PushEvery from the accept on (see HoldOptions.Push).
	BackendPushPort = 81
)

// Options says how many of each host to build; zero values take defaults.
type Options struct {
	Clients     int // default 1
	Directors   int // default 1
	RealServers int // default 2
}

// Topology is one test's network.
type Topology struct {
	// ID prefixes every namespace name: "<ID>-<host>".
	ID string

	Switch   *Netns // holds one bridge per segment; no addresses
	Clients  *Segment
	Frontend *Segment
	Backend  *Segment

	Router      *Node
	ClientHosts []*Node
	Directors   []*Director
	RealServers []*Node

	all []*Netns // in creation order, for cleanup and dumps
}

// Segment is one L2 network: a bridge in the switch namespace.
type Segment struct {
	Name    string // bridge name, and the interface name on every host
	Prefix  netip.Prefix
	Prefix6 netip.Prefix
	tag     string // short name for switch ports
	topo    *Topology
}

// Node is a host: a namespace attached to one or more segments.
type Node struct {
	*Netns
	Host   string                // "client1", "router", "dir1", "rs1"
	Addrs  map[string]netip.Addr // segment name -> address there
	Addrs6 map[string]netip.Addr // segment name -> IPv6 address there
}

// Addr returns the node's address on a segment (invalid if not attached).
func (n *Node) Addr(s *Segment) netip.Addr { return n.Addrs[s.Name] }

// Addr6 returns the node's IPv6 address on a segment.
func (n *Node) Addr6(s *Segment) netip.Addr { return n.Addrs6[s.Name] }

// defaultVia sets the node's IPv4 and IPv6 default routes to gw's addresses
// on seg.
func (n *Node) defaultVia(t testing.TB, gw *Node, seg *Segment) {
	t.Helper()
	must(t, n.ip("route", "add", "default", "via", gw.Addr(seg).String()))
	must(t, n.ip("-6", "route", "add", "default", "via", gw.Addr6(seg).String()))
}

// forward turns on IPv4 and IPv6 forwarding.
func (n *Node) forward(t testing.TB) {
	t.Helper()
	must(t, n.Sysctl("net.ipv4.ip_forward", "1"))
	must(t, n.Sysctl("net.ipv6.conf.all.forwarding", "1"))
}

// Director is a node where IPVS (and later lbd) runs.
type Director struct {
	*Node
}

// New builds the topology and registers its removal with t.Cleanup.
func New(t testing.TB, opts Options) *Topology {
	t.Helper()
	RequireRoot(t)
	if opts.Clients == 0 {
		opts.Clients = 1
	}
	if opts.Directors == 0 {
		opts.Directors = 1
	}
	if opts.RealServers == 0 {
		opts.RealServers = 2
	}

	tp := &Topology{ID: newID()}
	t.Cleanup(func() { tp.destroy(t) })
	t.Logf("topology %s: %d client(s), %d director(s), %d real server(s)",
		tp.ID, opts.Clients, opts.Directors, opts.RealServers)

	tp.Switch = tp.newNetns(t, "sw")
	tp.Clients = tp.newSegment(t, "clients", "cl", ClientsPrefix, ClientsPrefix6)
	tp.Frontend = tp.newSegment(t, "frontend", "fe", FrontendPrefix, FrontendPrefix6)
	tp.Backend = tp.newSegment(t, "backend", "be", BackendPrefix, BackendPrefix6)

	tp.Router = tp.AddNode(t, "router")
	tp.Clients.Attach(t, tp.Router, 1)
	tp.Frontend.Attach(t, tp.Router, 1)
	tp.Router.forward(t)

	for i := 1; i <= opts.Directors; i++ {
		tp.AddDirector(t)
	}
	tp.RouteVIPsVia(t, tp.Directors[0])

	for i := 1; i <= opts.Clients; i++ {
		c := tp.AddNode(t, fmt.Sprintf("client%d", i))
		tp.Clients.Attach(t, c, hostBase+i-1)
		c.defaultVia(t, tp.Router, tp.Clients)
		tp.ClientHosts = append(tp.ClientHosts, c)
	}
	for i := 1; i <= opts.RealServers; i++ {
		tp.AddRealServer(t)
	}

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("topology %s at failure:\n%s", tp.ID, tp.Dump())
		}
	})
	return tp
}

// AddNode creates a bare host (a namespace with lo up) attached to nothing.
// Attach it with Segment.Attach. host must be at most 12 characters.
func (tp *Topology) AddNode(t testing.TB, host string) *Node {
	t.Helper()
	if len(host) > 12 {
		t.Fatalf("host name %q longer than 12 characters", host)
	}
	return &Node{Netns: tp.newNetns(t, host), Host: host, Addrs: map[string]netip.Addr{}, Addrs6: map[string]netip.Addr{}}
}

// AddDirector adds a director on the frontend and backend segments, with
// forwarding on and a default route to the router. Director i (from 1) gets
// host number i on the backend and 10+i on the frontend.
func (tp *Topology) AddDirector(t testing.TB) *Director {
	t.Helper()
	i := len(tp.Directors) + 1
	d := &Director{Node: tp.AddNode(t, fmt.Sprintf("dir%d", i))}
	tp.Frontend.Attach(t, d.Node, 10+i)
	tp.Backend.Attach(t, d.Node, i)
	d.forward(t)
	d.defaultVia(t, tp.Router, tp.Frontend)
	tp.Directors = append(tp.Directors, d)
	return d
}

// AddRealServer adds a real server on the backend segment whose default
// route goes through the first director.
func (tp *Topology) AddRealServer(t testing.TB) *Node {
	t.Helper()
	i := len(tp.RealServers) + 1
	rs := tp.AddNode(t, fmt.Sprintf("rs%d", i))
	tp.Backend.Attach(t, rs, hostBase+i-1)
	rs.defaultVia(t, tp.Directors[0].Node, tp.Backend)
	tp.RealServers = append(tp.RealServers, rs)
	return rs
}

// AddHost adds a plain host on a segment (e.g. a Consul agent on the
// backend, reachable from the directors), with host number num, and a
// default route via gateway when gateway is valid.
func (tp *Topology) AddHost(t testing.TB, host string, seg *Segment, num int, gateway netip.Addr) *Node {
	t.Helper()
	n := tp.AddNode(t, host)
	seg.Attach(t, n, num)
	if gateway.IsValid() {
		must(t, n.ip("route", "add", "default", "via", gateway.String()))
	}
	return n
}

// RouteVIPsVia points the router's route for VIPPrefix at a director.
func (tp *Topology) RouteVIPsVia(t testing.TB, d *Director) {
	t.Helper()
	must(t, tp.Router.ip("route", "replace", VIPPrefix.String(), "via", d.Addr(tp.Frontend).String()))
	must(t, tp.Router.ip("-6", "route", "replace", VIPPrefix6.String(), "via", d.Addr6(tp.Frontend).String()))
}

// AddVIP puts vip on the director's VIPLink (a dummy link, created if
// missing), so the director accepts traffic for it.
func (d *Director) AddVIP(t testing.TB, vip netip.Addr) {
	t.Helper()
	if err := d.ip("link", "show", VIPLink); err != nil {
		must(t, d.ip("link", "add", VIPLink, "type", "dummy"))
		must(t, d.ip("link", "set", VIPLink, "up"))
	}
	must(t, d.ip("addr", "add", netip.PrefixFrom(vip, vip.BitLen()).String(), "dev", VIPLink))
}

// VIP6 returns the n-th address of VIPPrefix6 (n from 1).
func VIP6(n int) netip.Addr { return hostAddr(VIPPrefix6, n) }

// VIP returns the n-th address of VIPPrefix (n from 1).
func VIP(n int) netip.Addr {
	a := VIPPrefix.Addr()
	for i := 0; i < n; i++ {
		a = a.Next()
	}
	return a
}

// newSegment creates a segment's bridge in the switch namespace.
func (tp *Topology) newSegment(t testing.TB, name, tag string, prefix, prefix6 netip.Prefix) *Segment {
	t.Helper()
	s := &Segment{Name: name, Prefix: prefix, Prefix6: prefix6, tag: tag, topo: tp}
	must(t, tp.Switch.ip("link", "add", name, "type", "bridge"))
	must(t, tp.Switch.ip("link", "set", name, "up"))
	return s
}

// Attach connects a node to the segment with a veth pair (named after the
// segment on the node, "<tag>-<host>" on the switch) and gives it the
// segment's address with host number num.
func (s *Segment) Attach(t testing.TB, n *Node, num int) netip.Addr {
	t.Helper()
	addr := hostAddr(s.Prefix, num)
	port := s.tag + "-" + n.Host
	sw := s.topo.Switch
	must(t, runIP("link", "add", s.Name, "netns", n.Name, "type", "veth", "peer", "name", port, "netns", sw.Name))
	must(t, sw.ip("link", "set", port, "master", s.Name, "up"))
	must(t, n.ip("addr", "add", netip.PrefixFrom(addr, s.Prefix.Bits()).String(), "dev", s.Name))
	addr6 := hostAddr(s.Prefix6, num)
	// nodad: the address must work at once, not after duplicate detection.
	must(t, n.ip("-6", "addr", "add", netip.PrefixFrom(addr6, s.Prefix6.Bits()).String(), "dev", s.Name, "nodad"))
	must(t, n.ip("link", "set", s.Name, "up"))
	n.Addrs[s.Name] = addr
	n.Addrs6[s.Name] = addr6
	return addr
}

func hostAddr(p netip.Prefix, num int) netip.Addr {
	a := p.Masked().Addr()
	for i := 0; i < num; i++ {
		a = a.Next()
	}
	return a
}

// created lists every namespace this process made, for CheckCleanup.
var created struct {
	sync.Mutex
	names []string
}

// newNetns creates the namespace "<ID>-<host>" with lo up.
func (tp *Topology) newNetns(t testing.TB, host string) *Netns {
	t.Helper()
	n := &Netns{Name: tp.ID + "-" + host}
	must(t, runIP("netns", "add", n.Name))
	created.Lock()
	created.names = append(created.names, n.Name)
	created.Unlock()
	tp.all = append(tp.all, n)
	must(t, n.ip("link", "set", "lo", "up"))
	return n
}

// destroy kills whatever still runs in the namespaces and deletes them
// (which removes their links too).
func (tp *Topology) destroy(t testing.TB) {
	for i := len(tp.all) - 1; i >= 0; i-- {
		n := tp.all[i]
		if out, err := runIPOutput("netns", "pids", n.Name); err == nil {
			for _, pid := range strings.Fields(out) {
				_ = runCmd("kill", "-KILL", pid)
			}
		}
		if err := runIP("netns", "del", n.Name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	}
}

// CheckCleanup returns an error naming the namespaces this process created
// that still exist. TestMain calls it after the tests: a topology that
// does not clean up after itself would disturb the tests after it.
func CheckCleanup() error {
	created.Lock()
	defer created.Unlock()
	var left []string
	for _, name := range created.names {
		if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
			left = append(left, name)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("network namespaces left behind: %s", strings.Join(left, " "))
	}
	return nil
}

// Dump describes every namespace's links, addresses and routes, and the
// directors' IPVS tables: for failure messages.
func (tp *Topology) Dump() string {
	var b strings.Builder
	for _, n := range tp.all {
		fmt.Fprintf(&b, "=== %s\n", n.Name)
		for _, args := range [][]string{{"-br", "addr"}, {"route"}} {
			out, _ := runIPOutput(append([]string{"-n", n.Name}, args...)...)
			b.WriteString(out)
		}
	}
	for _, d := range tp.Directors {
		out, _ := d.Exec("ipvsadm", "-Ln")
		fmt.Fprintf(&b, "=== %s ipvsadm -Ln\n%s", d.Name, out)
	}
	return b.String()
}

func newID() string {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "e2e" + hex.EncodeToString(b)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
