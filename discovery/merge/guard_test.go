package merge

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/consul"
)

// guarded is base with an IPv6 service, for the refusals of real servers
// from Consul.
const guarded = base + `
[[service]]
name = "web6"
vips = ["2001:db8:1::10"]
port = 80
[service.consul]
service = "web6-app"
`

var testHost = []netip.Addr{netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("2001:db8:9::1")}

func TestConsulRealServerRefusals(t *testing.T) {
	cfg := load(t, guarded)
	web, web6 := Queries(cfg)[0].Key(), Queries(cfg)[2].Key()
	// A Consul-defined service, whose VIP no real server may have either.
	tagged := map[string][]consul.Instance{"api": {inst("a1", "10.0.2.1", 80, consul.Passing, 1, map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80"}, "lbd")}}
	w := func(v string) map[string]string { return map[string]string{"lbd-weight": v} }
	tests := []struct {
		name, addr string
		meta       map[string]string
		allow      string // real_server_networks, comma-separated
		want       string // the Problem's message; "" when kept
	}{
		{"an ordinary real server", "10.0.0.7", nil, "", ""},
		{"the box's address", "10.9.0.1", nil, "", "address 10.9.0.1 is this director's own address; a real server from Consul may not point a VIP at the director itself"},
		{"the box's address, IPv4-mapped", "::ffff:10.9.0.1", nil, "", "address 10.9.0.1 is this director's own address; a real server from Consul may not point a VIP at the director itself"},
		{"the box's IPv6 address", "2001:db8:9::1", nil, "", "address 2001:db8:9::1 is this director's own address; a real server from Consul may not point a VIP at the director itself"},
		{"loopback", "127.0.0.1", nil, "", "address 127.0.0.1 is not a routable unicast address"},
		{"loopback, IPv4-mapped", "::ffff:127.0.0.2", nil, "", "address 127.0.0.2 is not a routable unicast address"},
		{"IPv6 loopback", "::1", nil, "", "address ::1 is not a routable unicast address"},
		{"link-local", "169.254.0.5", nil, "", "address 169.254.0.5 is not a routable unicast address"},
		{"IPv6 link-local with zone", "fe80::1%eth0", nil, "", "address fe80::1 is not a routable unicast address"},
		{"multicast", "224.0.0.5", nil, "", "address 224.0.0.5 is not a routable unicast address"},
		{"IPv6 multicast", "ff02::1", nil, "", "address ff02::1 is not a routable unicast address"},
		{"limited broadcast", "255.255.255.255", nil, "", "address 255.255.255.255 is not a routable unicast address"},
		{"unspecified", "0.0.0.0", nil, "", "address 0.0.0.0 is not a routable unicast address"},
		{"this network", "0.1.2.3", nil, "", "address 0.1.2.3 is not a routable unicast address"},
		{"IPv6 unspecified", "::", nil, "", "address :: is not a routable unicast address"},
		{"IPv4-compatible IPv6", "::10.0.0.7", nil, "", "address ::a00:7 is not a routable unicast address"},
		{"a file VIP of another service", "192.0.2.53", nil, "", `address 192.0.2.53 is a VIP of service "dns"; a real server from Consul may not be a VIP`},
		{"a Consul-defined VIP", "198.51.100.1", nil, "", `address 198.51.100.1 is a VIP of service "api"; a real server from Consul may not be a VIP`},
		{"inside the allow-list", "10.0.0.7", nil, "10.0.0.0/8", ""},
		{"outside the allow-list", "172.16.0.1", nil, "10.0.0.0/8, 2001:db8::/32", "address 172.16.0.1 is outside [consul.virtual_services] real_server_networks (10.0.0.0/8, 2001:db8::/32); expected a real server in one of them"},
		{"the allow-list's broadcast", "10.255.255.255", nil, "10.0.0.0/8", "address 10.255.255.255 is the broadcast address of a network of [consul.virtual_services] real_server_networks"},
		{"an IPv4-mapped allow-list", "10.0.0.7", nil, "::ffff:10.0.0.0/104", ""},
		{"the box's address inside the allow-list", "10.9.0.1", nil, "10.0.0.0/8", "address 10.9.0.1 is this director's own address"},
		{"the highest weight", "10.0.0.7", w("256"), "", ""},
		{"a weight above the range", "10.0.0.7", w("257"), "", `meta lbd-weight = "257" is out of range; expected a weight 0..256, and the instance is refused rather than given another weight`},
		{"a negative weight", "10.0.0.7", w("-1"), "", `meta lbd-weight = "-1" is out of range`},
		{"a weight beyond int", "10.0.0.7", w("99999999999999999999999"), "", `meta lbd-weight = "99999999999999999999999" is out of range`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := *cfg
			c.Consul.VirtualServices.RealServerNetworks = nil
			for p := range strings.SplitSeq(tt.allow, ",") {
				if p = strings.TrimSpace(p); p != "" {
					c.Consul.VirtualServices.RealServerNetworks = append(c.Consul.VirtualServices.RealServerNetworks, netip.MustParsePrefix(p))
				}
			}
			key, svc := web, "web"
			if a := netip.MustParseAddr(tt.addr); a.Is6() && !a.Is4In6() {
				key, svc = web6, "web6"
			}
			in := inst("x", tt.addr, 80, consul.Passing, 9, tt.meta)
			r := Compute(Input{Config: &c, HostAddrs: testHost, Snapshot: consul.Snapshot{Services: map[string][]consul.Instance{key: {in}}, Tagged: tagged}})
			kept := len(r.Reals[svc]) == 1
			subject := instanceSubject(svc+"-app", in)
			var got []string
			for _, p := range r.Problems {
				if p.Subject == subject {
					got = append(got, p.Msg)
				}
			}
			switch {
			case tt.want == "" && (!kept || len(got) > 0):
				t.Errorf("refused, want kept: reals %v, problems %v", r.Reals, r.Problems)
			case tt.want != "" && (kept || len(got) != 1 || !strings.HasPrefix(got[0], tt.want)):
				t.Errorf("reals %v, problems of %s: %q; want it refused with %q", r.Reals, subject, got, tt.want)
			}
		})
	}
}

// TestHostileRegistration is issue #14's: a registration tagged for lbd,
// with a VIP from the pool and port 22, whose instance is the director.
// Before the forbidden set, the VIP forwarded to the director's sshd.
func TestHostileRegistration(t *testing.T) {
	cfg := load(t, base)
	evil := map[string]string{"lbd-vip": "198.51.100.66", "lbd-port": "22"}
	tagged := map[string][]consul.Instance{"evil": {
		inst("e1", "10.9.0.1", 22, consul.Passing, 1, evil, "lbd"),
		inst("e2", "::ffff:10.9.0.1", 22, consul.Passing, 2, evil, "lbd"),
		inst("e3", "127.0.0.1", 22, consul.Passing, 3, evil, "lbd"),
	}}
	r := Compute(Input{Config: cfg, HostAddrs: testHost, Snapshot: consul.Snapshot{Tagged: tagged}})
	want := `consul service "evil" instance "e1" on node "n-e1": address 10.9.0.1 is this director's own address; a real server from Consul may not point a VIP at the director itself
consul service "evil" instance "e2" on node "n-e2": address 10.9.0.1 is this director's own address; a real server from Consul may not point a VIP at the director itself
consul service "evil" instance "e3" on node "n-e3": address 127.0.0.1 is not a routable unicast address (loopback, link-local, multicast, broadcast, unspecified and 0.0.0.0/8 are refused); IPVS NAT cannot forward to it`
	if got := problems(r.Problems); got != want {
		t.Errorf("problems:\n%s\nwant:\n%s", got, want)
	}
	st := desired.Compute(desired.Input{Config: cfg, Discovered: r.Reals, DiscoveredServices: r.Services, HostAddrs: testHost})
	for _, s := range st.Services {
		for _, d := range s.Dests {
			if d.Addr.Addr() == testHost[0] || d.Addr.Addr().IsLoopback() {
				t.Errorf("virtual server %s forwards to %s, the director itself", s.Key, d.Addr)
			}
		}
	}
}

// TestConsulVIPOnTheBox: a VIP from Consul that is the box's own address
// would take over its ports, whatever the real servers.
func TestConsulVIPOnTheBox(t *testing.T) {
	cfg := load(t, base)
	host := []netip.Addr{netip.MustParseAddr("198.51.100.5")}
	r := Compute(Input{Config: cfg, HostAddrs: host, Snapshot: consul.Snapshot{Tagged: map[string][]consul.Instance{"ssh": {
		inst("s1", "10.0.0.9", 22, consul.Passing, 1, map[string]string{"lbd-vip": "198.51.100.5", "lbd-port": "22"}, "lbd")}}}})
	want := `consul service "ssh": meta lbd-vip: 198.51.100.5 is this director's own address; a VIP from Consul may not take over the director's own ports`
	if len(r.Services) != 0 || problems(r.Problems) != want {
		t.Errorf("services %v, problems:\n%s\nwant:\n%s", r.Services, problems(r.Problems), want)
	}
}
