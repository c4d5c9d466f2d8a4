package desired

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

func parse(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	return cfg
}

func hk(service, addr string) lvs.HealthKey {
	return lvs.HealthKey{Service: service, Addr: netip.MustParseAddrPort(addr)}
}

const twoReals = `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
%s
[[service.real_server]]
address = "10.0.0.1"
weight = 3
[[service.real_server]]
address = "10.0.0.2"
port = 8080
`

func TestCompute(t *testing.T) {
	tests := []struct {
		name       string
		config     string
		health     map[lvs.HealthKey]bool
		discovered map[string][]config.RealServer
		want       string // ipvsadm -Sn form
		wantVIPs   string
	}{
		{"weights and ports; unknown health takes the initial state",
			strings.Replace(twoReals, "%s", "", 1), nil, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 3\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"unhealthy real server is drained by default",
			strings.Replace(twoReals, "%s", "", 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false, hk("web", "10.0.0.2:8080"): true}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 0\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"unhealthy real server is removed with on_unhealthy = remove",
			strings.Replace(twoReals, "%s", `on_unhealthy = "remove"`, 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"initial_state unhealthy keeps new real servers out until checked",
			strings.Replace(twoReals, "%s", "[service.health_check]\ninitial_state = \"unhealthy\"", 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.2:8080"): true}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 0\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"type none ignores health results",
			strings.Replace(twoReals, "%s", "[service.health_check]\ntype = \"none\"", 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 3\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"below quorum, the sorry server serves and real servers drain",
			strings.Replace(twoReals, "%s", `quorum = 2
sorry_server = "10.0.0.99:80"`, 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 0\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 0\n-a -t 192.0.2.10:80 -r 10.0.0.99:80 -m -w 1\n",
			"192.0.2.10"},
		{"at quorum, the sorry server is not used",
			strings.Replace(twoReals, "%s", `quorum = 2
sorry_server = "10.0.0.99:80"`, 1), nil, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 3\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"below quorum with keep, every real server keeps its weight",
			strings.Replace(twoReals, "%s", `quorum = 2
quorum_fallback = "keep"`, 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 3\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"below quorum with healthy, only healthy ones serve",
			strings.Replace(twoReals, "%s", `quorum = 2
on_unhealthy = "remove"`, 1), map[lvs.HealthKey]bool{hk("web", "10.0.0.1:80"): false}, nil,
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n",
			"192.0.2.10"},
		{"discovered real servers join the configured ones",
			strings.Replace(twoReals, "%s", "", 1), nil,
			map[string][]config.RealServer{"web": {{Address: netip.MustParseAddr("10.0.0.3"), Port: 80, Weight: 5, HealthCheck: &config.HealthCheck{Type: config.CheckNone}, Pos: config.Pos{File: "consul:web"}}}},
			"-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.0.0.1:80 -m -w 3\n-a -t 192.0.2.10:80 -r 10.0.0.2:8080 -m -w 1\n-a -t 192.0.2.10:80 -r 10.0.0.3:80 -m -w 5\n",
			"192.0.2.10"},
		{"several VIPs, UDP, persistence and scheduler flags, IPv6",
			`
[[service]]
name = "dns"
vips = ["192.0.2.54", "192.0.2.53"]
port = 53
protocol = "udp"
scheduler = "sh"
scheduler_flags = ["sh-port", "sh-fallback"]
real_server = [{ address = "10.0.0.5" }]
[[service]]
name = "v6"
vips = ["2001:db8::10"]
port = 443
scheduler = "rr"
session_affinity = true
real_server = [{ address = "2001:db8:1::5" }]
[[service]]
name = "sticky"
vips = ["192.0.2.53"]
port = 80
session_affinity = true
session_affinity_timeout = "10m"
`, nil, nil,
			`-A -u 192.0.2.53:53 -s sh -b sh-fallback,sh-port
-a -u 192.0.2.53:53 -r 10.0.0.5:53 -m -w 1
-A -t 192.0.2.53:80 -s wrr -p 600
-A -u 192.0.2.54:53 -s sh -b sh-fallback,sh-port
-a -u 192.0.2.54:53 -r 10.0.0.5:53 -m -w 1
-A -t [2001:db8::10]:443 -s rr -p 10800
-a -t [2001:db8::10]:443 -r [2001:db8:1::5]:443 -m -w 1
`,
			"192.0.2.53 192.0.2.54 2001:db8::10"},
		{"persistence and scheduler flags in ipvsadm -Sn's order", `
[[service]]
name = "sticky-sh"
vips = ["192.0.2.60"]
port = 80
scheduler = "sh"
scheduler_flags = ["sh-fallback"]
session_affinity = true
session_affinity_timeout = "5m"
`, nil, nil, "-A -t 192.0.2.60:80 -s sh -p 300 -b sh-fallback\n", "192.0.2.60"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Compute(Input{Config: parse(t, tt.config), Health: tt.health, Discovered: tt.discovered})
			var b strings.Builder
			if err := WriteIPVS(&b, st); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
			var vips []string
			for _, v := range st.VIPs {
				vips = append(vips, v.String())
			}
			if got := strings.Join(vips, " "); got != tt.wantVIPs {
				t.Errorf("VIPs %q, want %q", got, tt.wantVIPs)
			}
		})
	}
}

func TestComputeKeepsProvenanceAndMasks(t *testing.T) {
	st := Compute(Input{Config: parse(t, `
[[service]]
name = "v6"
vips = ["2001:db8::10"]
port = 443
session_affinity = true
real_server = [{ address = "2001:db8:1::5" }]
[[service]]
name = "v4"
vips = ["192.0.2.1"]
port = 443
session_affinity = true
[[service]]
name = "v6-plain"
vips = ["2001:db8::11"]
port = 80
`)})
	v4, v6, plain := st.Services[0], st.Services[1], st.Services[2]
	if v6.Netmask != 128 || v4.Netmask != 0xffffffff || v4.Flags != FlagPersistent {
		t.Errorf("netmasks v4 %#x v6 %d flags %#x", v4.Netmask, v6.Netmask, v4.Flags)
	}
	if plain.Netmask != 128 || plain.Flags != 0 {
		t.Errorf("a non-persistent IPv6 virtual server needs netmask 128 (the kernel refuses 0): %d, flags %#x", plain.Netmask, plain.Flags)
	}
	if v6.Name != "v6" || v6.Source.String() != "lbd.toml:2:1" || v6.Dests[0].Source().String() != "lbd.toml:7:16" {
		t.Errorf("provenance: service %q from %q, dest from %q", v6.Name, v6.Source, v6.Dests[0].Source())
	}
}

// TestComputeReusesPrev: with Prev, a service whose destinations come out
// the same shares Prev's slice (appliers skip it by identity), a changed
// one gets its own, and the result equals a Compute without Prev.
func TestComputeReusesPrev(t *testing.T) {
	const text = `
[dataplane]
node_cidrs = ["198.51.100.0/24"]
[[service]]
name = "a"
vips = ["192.0.2.1", "192.0.2.2"]
port = 80
real_server = [{ address = "10.0.0.1", weight = %d }, { address = "10.0.0.2" }]
[[service]]
name = "b"
vips = ["192.0.2.3"]
port = 80
node_port = 30080
real_server = [{ address = "10.0.0.3" }]
[[service]]
name = "np"
port = 80
node_port = 30081
real_server = [{ address = "10.0.0.4" }]
`
	host := []netip.Addr{netip.MustParseAddr("198.51.100.7")}
	cfg := func(w int) *config.Config { return parse(t, strings.Replace(text, "%d", fmt.Sprint(w), 1)) }
	base := cfg(1)
	first := Compute(Input{Config: base, HostAddrs: host, HealthVersion: 1})
	downB := map[lvs.HealthKey]bool{hk("b", "10.0.0.3:80"): false}
	tests := []struct {
		name    string
		in      Input
		changed []string // services whose destinations are new
		// stale is set when health changed under the same version: the
		// caller broke its promise, and Compute trusted it.
		stale bool
	}{
		{"same input, reloaded", Input{Config: cfg(1), HostAddrs: host}, nil, false},
		{"same input, same configuration", Input{Config: base, HostAddrs: host, HealthVersion: 1}, nil, false},
		{"a weight change", Input{Config: cfg(2), HostAddrs: host}, []string{"a"}, false},
		{"health drops a real server, reloaded", Input{Config: cfg(1), HostAddrs: host, Health: downB}, []string{"b"}, false},
		{"health drops a real server, new version", Input{Config: base, HostAddrs: host, Health: downB, HealthVersion: 2}, []string{"b"}, false},
		{"health drops a real server, unversioned", Input{Config: base, HostAddrs: host, Health: downB}, []string{"b"}, false},
		{"health changed under the same version", Input{Config: base, HostAddrs: host, Health: downB, HealthVersion: 1}, nil, true},
		{"no node address any more", Input{Config: cfg(1)}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Prev = &first
			got := Compute(in)
			in.Prev = nil
			if want := Compute(in); reflect.DeepEqual(got.Services, want.Services) == tt.stale {
				t.Fatalf("with Prev:\n%+v\nwithout:\n%+v", got.Services, want.Services)
			}
			for i := range got.Services {
				s := &got.Services[i]
				old, _ := first.lookupDests(&in.Config.Services[slices.IndexFunc(in.Config.Services, func(c config.Service) bool { return c.Name == s.Name })], 0)
				shared := old != nil && &old[0] == &s.Dests[0]
				if want := !slices.Contains(tt.changed, s.Name); shared != want {
					t.Errorf("%s (%s): shares Prev's destinations: %v, want %v", s.Key, s.Name, shared, want)
				}
			}
		})
	}
}

func TestKeepRemoved(t *testing.T) {
	key := func(last byte) lvs.Key {
		return lvs.Key{Addr: netip.AddrFrom4([4]byte{192, 0, 2, last}), Port: 80, Protocol: lvs.TCP}
	}
	dest := func(last byte, w int) Dest {
		return Dest{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, last}), 80), Weight: w}
	}
	svc := func(k byte, ds ...Dest) Service { return Service{Key: key(k), Scheduler: "rr", Dests: ds} }
	vip := func(k byte) netip.Addr { return key(k).Addr }
	tests := []struct {
		name       string
		prev, next State
		want       State
	}{
		{"nothing removed: next as it is",
			State{Services: []Service{svc(1, dest(1, 1))}, VIPs: []netip.Addr{vip(1)}},
			State{Services: []Service{svc(1, dest(1, 5)), svc(2, dest(2, 1))}, VIPs: []netip.Addr{vip(1), vip(2)}},
			State{Services: []Service{svc(1, dest(1, 5)), svc(2, dest(2, 1))}, VIPs: []netip.Addr{vip(1), vip(2)}}},
		{"a removed virtual server is kept with its VIP",
			State{Services: []Service{svc(1, dest(1, 1)), svc(3, dest(3, 2))}, VIPs: []netip.Addr{vip(1), vip(3)}},
			State{Services: []Service{svc(1, dest(1, 1))}, VIPs: []netip.Addr{vip(1)}},
			State{Services: []Service{svc(1, dest(1, 1)), svc(3, dest(3, 2))}, VIPs: []netip.Addr{vip(1), vip(3)}}},
		{"removed destinations are kept with their weight, other changes applied",
			State{Services: []Service{svc(1, dest(1, 1), dest(2, 1), dest(3, 1))}},
			State{Services: []Service{svc(1, dest(2, 0), dest(4, 1))}},
			State{Services: []Service{svc(1, dest(1, 1), dest(2, 0), dest(3, 1), dest(4, 1))}}},
		{"a new virtual server goes in beside a kept one",
			State{Services: []Service{svc(2, dest(1, 1))}, VIPs: []netip.Addr{vip(2)}},
			State{Services: []Service{svc(1, dest(1, 1)), svc(3, dest(1, 1))}, VIPs: []netip.Addr{vip(1), vip(3)}},
			State{Services: []Service{svc(1, dest(1, 1)), svc(2, dest(1, 1)), svc(3, dest(1, 1))}, VIPs: []netip.Addr{vip(1), vip(2), vip(3)}}},
		{"a kept virtual server's VIP stays unbound when this box stopped serving it",
			State{Services: []Service{svc(1, dest(1, 1)), svc(3, dest(3, 2))}, VIPs: []netip.Addr{vip(1), vip(3)}},
			State{Services: []Service{svc(1, dest(1, 1))}, VIPs: []netip.Addr{vip(1)}, serving: ServeOnly(vip(1))},
			State{Services: []Service{svc(1, dest(1, 1)), svc(3, dest(3, 2))}, VIPs: []netip.Addr{vip(1)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := KeepRemoved(tt.prev, tt.next)
			if !reflect.DeepEqual(got.Services, tt.want.Services) || !slices.Equal(got.VIPs, tt.want.VIPs) {
				t.Errorf("services %+v\nVIPs %v\nwant %+v\n%v", got.Services, got.VIPs, tt.want.Services, tt.want.VIPs)
			}
			if Gone(tt.prev.Services[0].Dests, got.Services[slices.IndexFunc(got.Services, func(s Service) bool { return s.Key == tt.prev.Services[0].Key })].Dests) != 0 {
				t.Errorf("a destination of prev is missing")
			}
		})
	}
}

// A floating address the box gave up is not announced by a held sync.
func TestKeepRemovedHeldFloating(t *testing.T) {
	inside := netip.MustParsePrefix("198.18.3.1/24")
	prev := State{Announce: map[string][]netip.Addr{"eth1": {inside.Addr()}}, Floating: []Floating{{Prefix: inside, Link: "eth1"}}}
	next := State{Announce: map[string][]netip.Addr{}, Floating: []Floating{{Prefix: inside, Link: "eth1", Held: true}}}
	if got := KeepRemoved(prev, next); len(got.Announce["eth1"]) != 0 {
		t.Errorf("announced on eth1: %v, want nothing", got.Announce["eth1"])
	}
}

// TestDestSize guards a State's per-destination cost (100,000 at scale):
// the forwarding method lives in the real server, not here.
func TestDestSize(t *testing.T) {
	if got := unsafe.Sizeof(Dest{}); got != 48 {
		t.Errorf("Dest is %d bytes; want 48", got)
	}
}
