package merge

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/lvs"
)

func load(t testing.TB, text string) *config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lbd.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Set here rather than in the file, so that these tests do not depend
	// on which keys the section requires.
	cfg.Consul.VirtualServices = config.ConsulVirtualServices{Tag: "lbd", VIPPools: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}
	return cfg
}

const base = `

[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
on_unhealthy = "remove"
real_server = [{ address = "10.0.0.1" }]
[service.consul]
service = "web-app"
tags = ["prod"]
port = 8080

[[service]]
name = "dns"
vips = ["192.0.2.53"]
port = 53
protocol = "udp"
[service.consul]
service = "dns"
passing_only = false
[service.health_check]
type = "udp"
payload = "ping"
`

func inst(id, addr string, port uint16, status string, create uint64, meta map[string]string, tags ...string) consul.Instance {
	return consul.Instance{ID: id, Node: "n-" + id, Address: netip.MustParseAddr(addr), Port: port, Status: status,
		CreateIndex: create, Meta: meta, Tags: tags}
}

func reals(rs []config.RealServer) string {
	var b []string
	for _, r := range rs {
		b = append(b, fmt.Sprintf("%s w=%d down=%v check=%s", r.AddrPort(), r.Weight, r.Down, r.HealthCheck.Type))
	}
	return strings.Join(b, "; ")
}

func problems(ps []Problem) string {
	var b []string
	for _, p := range ps {
		b = append(b, p.String())
	}
	return strings.Join(b, "\n")
}

func TestQueries(t *testing.T) {
	cfg := load(t, strings.Replace(base, `tags = ["prod"]`, `tags = ["prod"]`+"\ndatacenter = \"dc2\"", 1))
	qs := Queries(cfg)
	if len(qs) != 2 || qs[0].Service != "web-app" || qs[0].Tags[0] != "prod" || qs[0].Datacenter != "dc2" || qs[0].PassingOnly || qs[1].Service != "dns" {
		t.Errorf("queries %+v; want web-app (prod, dc2, every health state) and dns", qs)
	}
}

func TestRealServersFromConsul(t *testing.T) {
	cfg := load(t, base)
	web := Queries(cfg)[0].Key()
	dns := Queries(cfg)[1].Key()
	tests := []struct {
		name     string
		services map[string][]consul.Instance
		want     map[string]string // service -> reals
		problems string
	}{
		{"not answered yet", nil, map[string]string{}, ""},
		{"port override, weight meta, file real server wins", map[string][]consul.Instance{web: {
			inst("a", "10.0.0.2", 9999, consul.Passing, 1, map[string]string{"lbd-weight": "5"}),
			inst("b", "10.0.0.1", 9999, consul.Passing, 2, nil), // 10.0.0.1:8080: not the file's :80
			inst("c", "10.0.0.3", 9999, consul.Warning, 3, nil),
			inst("d", "10.0.0.4", 9999, consul.Critical, 4, nil),
		}}, map[string]string{"web": "10.0.0.1:8080 w=1 down=false check=none; 10.0.0.2:8080 w=5 down=false check=none; 10.0.0.3:8080 w=1 down=true check=none; 10.0.0.4:8080 w=1 down=true check=none"}, ""},
		{"passing_only = false: warning counts, own checks apply", map[string][]consul.Instance{dns: {
			inst("a", "10.0.1.1", 53, consul.Warning, 1, nil),
			inst("b", "10.0.1.2", 53, consul.Critical, 2, nil),
		}}, map[string]string{"dns": "10.0.1.1:53 w=1 down=false check=udp; 10.0.1.2:53 w=1 down=true check=udp"}, ""},
		{"bad instances are reported, the others kept", map[string][]consul.Instance{web: {
			inst("v6", "2001:db8::1", 80, consul.Passing, 1, nil),
			inst("lo", "127.0.0.1", 80, consul.Passing, 2, nil),
			inst("vip", "192.0.2.10", 80, consul.Passing, 3, nil),
			inst("w", "10.0.0.5", 80, consul.Passing, 4, map[string]string{"lbd-weight": "heavy"}),
		}}, map[string]string{"web": "10.0.0.5:8080 w=1 down=false check=none"},
			`consul service "web-app" instance "lo" on node "n-lo": address 127.0.0.1 is not a routable unicast address (loopback, link-local, multicast, broadcast, unspecified and 0.0.0.0/8 are refused); IPVS NAT cannot forward to it
consul service "web-app" instance "v6" on node "n-v6": 2001:db8::1 is IPv6 but service "web" is IPv4; IPVS cannot forward across families
consul service "web-app" instance "vip" on node "n-vip": address 192.0.2.10 is a VIP of service "web"; a real server from Consul may not be a VIP
consul service "web-app" instance "w" on node "n-w": meta lbd-weight = "heavy" is not a weight; expected an integer 0..256 (using the default weight 1)`},
		{"an empty answer is an answer", map[string][]consul.Instance{web: {}}, map[string]string{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compute(Input{Config: cfg, Snapshot: consul.Snapshot{Services: tt.services}})
			if len(r.Reals) != len(tt.want) {
				t.Errorf("reals for %d services, want %d: %v", len(r.Reals), len(tt.want), r.Reals)
			}
			for name, want := range tt.want {
				if got := reals(r.Reals[name]); got != want {
					t.Errorf("%s:\n got %s\nwant %s", name, got, want)
				}
			}
			if got := problems(r.Problems); got != tt.problems {
				t.Errorf("problems:\n%s\nwant:\n%s", got, tt.problems)
			}
		})
	}
}

func TestVirtualServicesFromConsul(t *testing.T) {
	cfg := load(t, base)
	meta := func(vip, port string) map[string]string {
		return map[string]string{"lbd-vip": vip, "lbd-port": port}
	}
	tests := []struct {
		name     string
		tagged   map[string][]consul.Instance
		want     string // name vip:port reals, per service
		problems string
	}{
		{"a service with its instances", map[string][]consul.Instance{"api": {
			inst("a1", "10.0.2.1", 8443, consul.Passing, 10, meta("198.51.100.1", "443"), "lbd"),
			inst("a2", "10.0.2.2", 8443, consul.Critical, 11, meta("198.51.100.1", "443"), "lbd"),
			inst("a3", "10.0.2.3", 8443, consul.Passing, 12, meta("198.51.100.1", "443")), // no tag: not part of it
		}}, "api 198.51.100.1:443 [10.0.2.1:8443 w=1 down=false check=none; 10.0.2.2:8443 w=1 down=true check=none]", ""},
		{"a bad one does not affect the others", map[string][]consul.Instance{
			"bad":  {inst("b1", "10.0.3.1", 80, consul.Passing, 1, map[string]string{"lbd-vip": "203.0.113.1", "lbd-port": "80"}, "lbd")},
			"good": {inst("g1", "10.0.4.1", 80, consul.Passing, 2, meta("198.51.100.2", "80"), "lbd")},
		}, "good 198.51.100.2:80 [10.0.4.1:80 w=1 down=false check=none]",
			`consul service "bad": meta lbd-vip: 203.0.113.1 (VIP 1) is outside the VIP pools Consul may claim from (198.51.100.0/24); expected an address in [consul.virtual_services] vip_pools of ` + cfg.Files[0]},
		{"file wins a name", map[string][]consul.Instance{"web": {inst("w1", "10.0.5.1", 80, consul.Passing, 1, meta("198.51.100.3", "80"), "lbd")}},
			"", `consul service "web": a file service is already named "web"; the file wins`},
		{"the oldest registration keeps a VIP:port", map[string][]consul.Instance{
			"new": {inst("n1", "10.0.6.1", 80, consul.Passing, 20, meta("198.51.100.4", "80"), "lbd")},
			"old": {inst("o1", "10.0.7.1", 80, consul.Passing, 5, meta("198.51.100.4", "80"), "lbd")},
		}, "old 198.51.100.4:80 [10.0.7.1:80 w=1 down=false check=none]",
			`consul service "new": 198.51.100.4:80/tcp is already claimed by consul service "old" (registered by "o1" on node "n-o1"); it keeps it`},
		{"instances that disagree: the oldest defines", map[string][]consul.Instance{"api": {
			inst("y", "10.0.8.2", 80, consul.Passing, 31, meta("198.51.100.6", "80"), "lbd"),
			inst("x", "10.0.8.1", 80, consul.Passing, 30, meta("198.51.100.5", "80"), "lbd"),
		}}, "api 198.51.100.5:80 [10.0.8.1:80 w=1 down=false check=none; 10.0.8.2:80 w=1 down=false check=none]",
			`consul service "api": instance "y" on node "n-y" defines the virtual service differently from the oldest registration ("x" on node "n-x"), whose lbd-* meta is used`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compute(Input{Config: cfg, Snapshot: consul.Snapshot{Tagged: tt.tagged}})
			var got []string
			for _, s := range r.Services {
				got = append(got, fmt.Sprintf("%s %s [%s]", s.Name, netip.AddrPortFrom(s.VIPs[0], s.Port), reals(s.RealServers)))
			}
			if strings.Join(got, "\n") != tt.want {
				t.Errorf("services:\n%s\nwant:\n%s", strings.Join(got, "\n"), tt.want)
			}
			if got := problems(r.Problems); got != tt.problems {
				t.Errorf("problems:\n%s\nwant:\n%s", got, tt.problems)
			}
		})
	}
}

func TestFileClaimWinsOverConsul(t *testing.T) {
	cfg := load(t, strings.Replace(base, `vips = ["192.0.2.10"]`, `vips = ["198.51.100.9"]`, 1))
	r := Compute(Input{Config: cfg, Snapshot: consul.Snapshot{Tagged: map[string][]consul.Instance{"api": {
		inst("a", "10.0.9.1", 80, consul.Passing, 1, map[string]string{"lbd-vip": "198.51.100.9", "lbd-port": "80"}, "lbd")}}}})
	want := `consul service "api": 198.51.100.9:80/tcp is already claimed by service "web" (` + cfg.Services[0].Pos.String() + `); it keeps it`
	if len(r.Services) != 0 || problems(r.Problems) != want {
		t.Errorf("services %v, problems:\n%s\nwant:\n%s", r.Services, problems(r.Problems), want)
	}
}

// Consul's instances of a DR or tunnel service are forwarded like the
// service, at its port (config sets [service.consul]'s port: DR and
// tunnels cannot map ports).
func TestConsulRealServersForwardLikeTheirService(t *testing.T) {
	for _, tt := range []struct {
		forward string
		want    lvs.Forward
	}{
		{`forward = "dr"`, lvs.Forward{Method: lvs.DR}},
		{"forward = \"tun\"\ntunnel_type = \"gue\"\ntunnel_port = 6080", lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080}},
		{"", lvs.Forward{}},
	} {
		cfg := load(t, fmt.Sprintf(`
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
%s
[service.consul]
service = "web-app"
`, tt.forward))
		key := Queries(cfg)[0].Key()
		r := Compute(Input{Config: cfg, Snapshot: consul.Snapshot{Services: map[string][]consul.Instance{
			key: {inst("a", "10.0.0.2", 80, consul.Passing, 1, nil)},
		}}})
		got := r.Reals["web"]
		if len(got) != 1 || got[0].Forward != tt.want || got[0].Port != 80 {
			t.Errorf("%q: reals %+v, want one at port 80 forwarded %v", tt.forward, got, tt.want)
		}
	}
}
