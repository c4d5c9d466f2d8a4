package merge

import (
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/consul"
)

// fuzzed is what FuzzConsulMerge decodes its input into: the box's
// addresses, real_server_networks and Consul's registrations.
type fuzzed struct {
	host  []netip.Addr
	allow []netip.Prefix
	snap  consul.Snapshot
}

// decodeFuzz reads lines: the first is "host addresses|real server
// networks" (comma-separated), each other one instance,
// "service|id|node|address|port|create index|tags|k=v;k=v". Fields that do
// not parse are left empty; a line with an address that does not parse is
// skipped, as the Watcher does.
func decodeFuzz(cfg *config.Config, data string) fuzzed {
	var f fuzzed
	lines := strings.Split(data, "\n")
	if hdr := strings.SplitN(lines[0], "|", 2); len(hdr) == 2 {
		for s := range strings.SplitSeq(hdr[0], ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
				f.host = append(f.host, a)
			}
		}
		for s := range strings.SplitSeq(hdr[1], ",") {
			if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
				f.allow = append(f.allow, p)
			}
		}
	}
	f.snap = consul.Snapshot{Services: map[string][]consul.Instance{}, Tagged: map[string][]consul.Instance{}}
	keys := map[string]string{} // Consul service -> Snapshot.Services key
	for _, q := range Queries(cfg) {
		keys[q.Service] = q.Key()
	}
	for _, line := range lines[1:] {
		fs := strings.SplitN(line, "|", 8)
		fs = append(fs, make([]string, 8-len(fs))...)
		addr, err := netip.ParseAddr(fs[3])
		if err != nil {
			continue
		}
		port, _ := strconv.ParseUint(fs[4], 10, 16)
		create, _ := strconv.ParseUint(fs[5], 10, 64)
		in := consul.Instance{ID: fs[1], Node: fs[2], Address: addr, Port: uint16(port), CreateIndex: create, Status: consul.Passing}
		if fs[6] != "" {
			in.Tags = strings.Split(fs[6], ",")
		}
		if fs[7] != "" {
			in.Meta = map[string]string{}
			for kv := range strings.SplitSeq(fs[7], ";") {
				k, v, _ := strings.Cut(kv, "=")
				in.Meta[k] = v
			}
		}
		f.snap.Tagged[fs[0]] = append(f.snap.Tagged[fs[0]], in)
		if k, ok := keys[fs[0]]; ok {
			f.snap.Services[k] = append(f.snap.Services[k], in)
		}
	}
	return f
}

// FuzzConsulMerge feeds arbitrary registrations through Compute and the
// desired state: nothing panics, every instance left out is accounted for
// by a Problem, and no real server from Consul is in the forbidden set or
// outside the allow-list. CI runs it for a bounded time:
//
//	go test -run='^$' -fuzz=FuzzConsulMerge -fuzztime=20s ./discovery/merge/
func FuzzConsulMerge(f *testing.F) {
	// The hostile registration of issue #14: a VIP from the pool, port
	// 22, the director as the instance.
	f.Add("10.9.0.1|\nevil|e1|n1|10.9.0.1|22|1|lbd|lbd-vip=198.51.100.66;lbd-port=22\nevil|e2|n2|::ffff:10.9.0.1|22|2|lbd|lbd-vip=198.51.100.66;lbd-port=22")
	f.Add("10.9.0.1,2001:db8:9::1|10.0.0.0/8\nweb-app|a|n1|10.0.0.5|80|1||lbd-weight=300\nweb-app|b|n2|172.16.0.1|80|2||\nweb-app|c|n3|10.255.255.255|80|3||\nweb6-app|d|n4|::1|80|4||")
	f.Add("|\napi|a|n|10.0.2.1|443|5|lbd|lbd-vip=198.51.100.1,198.51.100.2;lbd-port=443;lbd-weight=7\napi|b|n|198.51.100.2|443|6|lbd|lbd-vip=198.51.100.1;lbd-port=443\nweb-app|x|n|198.51.100.1|80|1||\nweb-app|y|n|192.0.2.53|80|1||")
	f.Add("|\nweb|w|n|10.0.0.1|80|1|lbd|lbd-vip=198.51.100.3;lbd-port=80\nx|i|n|fe80::1%eth0|80|1|lbd|lbd-vip=2001:db8:ff::1;lbd-port=80;lbd-protocl=udp")
	cfg := load(f, guarded)
	cfg.Consul.VirtualServices.VIPPools = append(cfg.Consul.VirtualServices.VIPPools, netip.MustParsePrefix("2001:db8:ff::/64"))
	f.Fuzz(func(t *testing.T, data string) {
		if len(data) > 1<<16 {
			return
		}
		in := decodeFuzz(cfg, data)
		c := *cfg
		c.Consul.VirtualServices.RealServerNetworks = in.allow
		r := Compute(Input{Config: &c, Snapshot: in.snap, HostAddrs: in.host})
		if again := Compute(Input{Config: &c, Snapshot: in.snap, HostAddrs: in.host}); !reflect.DeepEqual(r, again) {
			t.Fatalf("two merges of the same input differ")
		}
		for _, p := range r.Problems {
			if strings.Contains(p.Msg, "panic:") {
				t.Fatalf("a registration made lbd panic: %s", p)
			}
		}
		checkReals(t, &c, in, r)
		checkAccounted(t, &c, in, r)
		st := desired.Compute(desired.Input{Config: &c, Discovered: r.Reals, DiscoveredServices: r.Services, HostAddrs: in.host})
		for _, vs := range st.Services {
			for _, d := range vs.Dests {
				if why := forbidden(&c, in, r, d.Addr.Addr()); why != "" && strings.HasPrefix(d.Source().File, "consul ") {
					t.Fatalf("virtual server %s forwards to %s from Consul, which is %s", vs.Key, d.Addr, why)
				}
			}
		}
	})
}

// forbidden says, independently of guard, why a real server from Consul
// may not have address a; "" when it may.
func forbidden(cfg *config.Config, in fuzzed, r Result, a netip.Addr) string {
	b := a.As16()
	switch {
	case a.Is4In6() || a.Zone() != "":
		return "not in canonical form"
	case !a.IsValid() || a.IsLoopback() || a.IsMulticast() || a.IsLinkLocalUnicast() || a.IsUnspecified() ||
		a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "not unicast"
	case a.Is4() && b[12] == 0, a.Is6() && [12]byte(b[:12]) == [12]byte{}:
		return "0.0.0.0/8 or ::/96"
	case slices.ContainsFunc(in.host, func(h netip.Addr) bool { return h.WithZone("").Unmap() == a }):
		return "the box's address"
	case len(in.allow) > 0 && !slices.ContainsFunc(in.allow, func(p netip.Prefix) bool { return canonPrefix(p).Contains(a) }):
		return "outside real_server_networks"
	case slices.ContainsFunc(in.allow, func(p netip.Prefix) bool { return isBroadcast(canonPrefix(p), a) }):
		return "a broadcast address of real_server_networks"
	}
	services := append(slices.Clone(cfg.Services), r.Services...)
	for i := range services {
		if slices.Contains(services[i].VIPs, a) {
			return "a VIP"
		}
	}
	return ""
}

func checkReals(t *testing.T, cfg *config.Config, in fuzzed, r Result) {
	t.Helper()
	all := slices.Collect(func(yield func([]config.RealServer) bool) {
		for _, rs := range r.Reals {
			yield(rs)
		}
		for _, s := range r.Services {
			yield(s.RealServers)
		}
	})
	for _, rs := range all {
		if len(rs) > maxInstances {
			t.Fatalf("%d real servers for one service, want at most %d", len(rs), maxInstances)
		}
		for _, x := range rs {
			if why := forbidden(cfg, in, r, x.Address); why != "" {
				t.Fatalf("real server %s from Consul is %s", x.AddrPort(), why)
			}
			if x.Weight < 0 || x.Weight > maxWeight {
				t.Fatalf("real server %s has weight %d", x.AddrPort(), x.Weight)
			}
		}
	}
	if len(r.Services) > maxServices {
		t.Fatalf("%d Consul-defined services, want at most %d", len(r.Services), maxServices)
	}
	for _, s := range r.Services {
		if len(s.VIPs) > maxVIPs {
			t.Fatalf("service %q has %d VIPs", s.Name, len(s.VIPs))
		}
	}
}

// checkAccounted checks that every instance that is part of a service and
// is not among its real servers has a Problem: its own, its service's, or
// the cap on services.
func checkAccounted(t *testing.T, cfg *config.Config, in fuzzed, r Result) {
	t.Helper()
	subjects := map[string]bool{}
	for _, p := range r.Problems {
		subjects[p.Subject] = true
	}
	served := func(rs []config.RealServer, a netip.Addr, port uint16) bool {
		return slices.ContainsFunc(rs, func(x config.RealServer) bool { return x.Address == a.WithZone("").Unmap() && x.Port == port })
	}
	account := func(service string, inst consul.Instance, rs []config.RealServer, port uint16) {
		if !served(rs, inst.Address, port) && !subjects[instanceSubject(service, inst)] && !subjects[serviceSubject(service)] && !subjects["consul virtual services"] {
			t.Fatalf("instance %q of %q (%s port %d) is neither served nor refused with a Problem; problems: %v", inst.ID, service, inst.Address, port, r.Problems)
		}
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if s.Consul == nil {
			continue
		}
		for _, inst := range in.snap.Services[query(s.Consul).Key()] {
			port := cmp0(s.Consul.Port, inst.Port)
			account(s.Consul.Service, inst, slices.Concat(s.RealServers, r.Reals[s.Name]), port)
		}
	}
	defined := map[string]*config.Service{}
	for i := range r.Services {
		defined[r.Services[i].Name] = &r.Services[i]
	}
	for name, insts := range in.snap.Tagged {
		for _, inst := range insts {
			if !slices.Contains(inst.Tags, cfg.Consul.VirtualServices.Tag) {
				continue // not part of a virtual service
			}
			var rs []config.RealServer
			if s := defined[name]; s != nil {
				rs = s.RealServers
			}
			account(name, inst, rs, inst.Port)
		}
	}
}

// isBroadcast says whether a is the last address of IPv4 network p, of
// /30 or wider.
func isBroadcast(p netip.Prefix, a netip.Addr) bool {
	if !p.Addr().Is4() || !a.Is4() || p.Bits() > 30 || !p.Contains(a) {
		return false
	}
	b := a.As4()
	for bit := p.Bits(); bit < 32; bit++ {
		if b[bit/8]&(0x80>>(bit%8)) == 0 {
			return false
		}
	}
	return true
}

func cmp0(a, b uint16) uint16 {
	if a != 0 {
		return a
	}
	return b
}
