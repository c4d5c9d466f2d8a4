package config

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// dr is a direct-routing service; its last line is line 6.
const dr = svc + "forward = \"dr\"\n"

// TestForwardMethods checks what each real server's Forward comes out as:
// the service's method, overridden key by key by the real server's.
func TestForwardMethods(t *testing.T) {
	gue := func(port uint16, c lvs.Checksum) lvs.Forward {
		return lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: port, Checksum: c}
	}
	tests := []struct {
		name, text string
		want       []lvs.Forward // per real server
	}{
		{"default is NAT", svc + "real_server = [{ address = \"10.0.0.1\" }]\n", []lvs.Forward{{}}},
		{"nat written", svc + "forward = \"nat\"\nreal_server = [{ address = \"10.0.0.1\", forward = \"nat\" }]\n", []lvs.Forward{{}}},
		{"dr, the port inherited or written the same", dr + "real_server = [{ address = \"10.0.0.1\" }, { address = \"10.0.0.2\", port = 80 }]\n",
			[]lvs.Forward{{Method: lvs.DR}, {Method: lvs.DR}}},
		{"tun defaults to ipip", svc + "forward = \"tun\"\nreal_server = [{ address = \"10.0.0.1\" }]\n",
			[]lvs.Forward{{Method: lvs.Tunnel, Tunnel: lvs.IPIP}}},
		{"gue with port and checksum, inherited", svc + "forward = \"tun\"\ntunnel_type = \"gue\"\ntunnel_port = 6080\ntunnel_checksum = \"remote\"\nreal_server = [{ address = \"10.0.0.1\" }]\n",
			[]lvs.Forward{gue(6080, lvs.RemoteChecksum)}},
		{"dr and tun mix; a real server's tunnel starts from ipip", dr + "real_server = [{ address = \"10.0.0.1\" }, { address = \"10.0.0.2\", forward = \"tun\" }, { address = \"10.0.0.3\", forward = \"tun\", tunnel_type = \"gre\", tunnel_checksum = \"checksum\" }]\n",
			[]lvs.Forward{{Method: lvs.DR}, {Method: lvs.Tunnel}, {Method: lvs.Tunnel, Tunnel: lvs.GRE, Checksum: lvs.Checksummed}}},
		{"a real server overrides key by key; options its encapsulation lacks are dropped", svc + "forward = \"tun\"\ntunnel_type = \"gue\"\ntunnel_port = 6080\ntunnel_checksum = \"checksum\"\n" +
			"real_server = [{ address = \"10.0.0.1\", tunnel_port = 7000 }, { address = \"10.0.0.2\", tunnel_type = \"gre\" }, { address = \"10.0.0.3\", tunnel_type = \"ipip\" }, { address = \"10.0.0.4\", forward = \"dr\" }]\n",
			[]lvs.Forward{gue(7000, lvs.Checksummed), {Method: lvs.Tunnel, Tunnel: lvs.GRE, Checksum: lvs.Checksummed}, {Method: lvs.Tunnel}, {Method: lvs.DR}}},
		{"GRE drops an inherited remote checksum", svc + "forward = \"tun\"\ntunnel_type = \"gue\"\ntunnel_port = 6080\ntunnel_checksum = \"remote\"\nreal_server = [{ address = \"10.0.0.1\", tunnel_type = \"gre\" }]\n",
			[]lvs.Forward{{Method: lvs.Tunnel, Tunnel: lvs.GRE}}},
		{"IPv6 dr", "[[service]]\nname = \"v6\"\nvips = [\"2001:db8::10\"]\nport = 443\nforward = \"dr\"\nreal_server = [{ address = \"2001:db8:1::5\" }]\n",
			[]lvs.Forward{{Method: lvs.DR}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, map[string]string{"lbd.toml": tt.text})
			cfg, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			loadBoth(t, path)
			s := cfg.Services[0]
			if len(s.RealServers) != len(tt.want) {
				t.Fatalf("%d real servers; want %d", len(s.RealServers), len(tt.want))
			}
			for i, r := range s.RealServers {
				if r.Forward != tt.want[i] {
					t.Errorf("real server %d: %+v; want %+v", i, r.Forward, tt.want[i])
				}
				if r.Port != s.Port {
					t.Errorf("real server %d: port %d; want the service's %d", i, r.Port, s.Port)
				}
			}
		})
	}
}

// TestForwardRefused checks each rule of the forwarding methods: every
// problem at once, at its file:line, saying what is expected.
func TestForwardRefused(t *testing.T) {
	tests := []invalidConfig{
		{"unknown method", map[string]string{"lbd.toml": svc + "forward = \"DR\"\n"},
			[][2]string{{"lbd.toml:6:1", `service[0].forward: "DR" is not accepted (did you mean "dr"?); expected one of: nat, dr, tun`}}},
		{"DR cannot map ports", map[string]string{"lbd.toml": dr + "real_server = [{ address = \"10.0.0.1\", port = 8080 }]\n"},
			[][2]string{{"lbd.toml:7:", "real_server[0].port: 8080 differs from the service's port 80; direct routing cannot map ports"}}},
		{"a tunnel cannot map ports either, nor its sorry server, nor Consul's port", map[string]string{"lbd.toml": svc + "forward = \"tun\"\nsorry_server = \"10.0.0.99:8080\"\n" +
			"[service.consul]\nservice = \"web\"\nport = 8080\n[[service.real_server]]\naddress = \"10.0.0.1\"\nport = 81\n"},
			[][2]string{{"lbd.toml:7:1", "sorry_server: port 8080 differs from the service's port 80; the sorry server is forwarded to by tunnelling too"},
				{"lbd.toml:10:1", "consul.port: 8080 differs from the service's port 80; tunnelling cannot map ports"},
				{"lbd.toml:13:1", "real_server[0].port: 81 differs from the service's port 80; tunnelling cannot map ports"}}},
		{"NAT does not mix with DR or tun, either way", map[string]string{"lbd.toml": svc + "real_server = [{ address = \"10.0.0.1\", forward = \"dr\" }]\n" +
			"[[service]]\nname = \"d\"\nvips = [\"192.0.2.11\"]\nport = 80\nforward = \"tun\"\nreal_server = [{ address = \"10.0.0.1\", forward = \"nat\" }]\n"},
			[][2]string{{"lbd.toml:6:", `real_server[0].forward: "dr" in service "web", which forwards by nat: NAT may not share a service with dr or tun`},
				{"lbd.toml:12:", `real_server[0].forward: "nat" in service "d", which forwards by tun: NAT may not share a service with dr or tun`}}},
		{"families", map[string]string{"lbd.toml": dr + "real_server = [{ address = \"2001:db8::5\" }]\n" +
			"[[service]]\nname = \"t\"\nvips = [\"192.0.2.11\"]\nport = 80\nforward = \"tun\"\nreal_server = [{ address = \"2001:db8::5\" }]\n"},
			[][2]string{{"lbd.toml:7:", "2001:db8::5 is IPv6 but service \"web\" is IPv4; direct routing cannot cross families"},
				{"lbd.toml:13:", "2001:db8::5 is IPv6 but service \"t\" is IPv4; lbd's tunnels are same-family only"}}},
		{"NAT-only keys", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"198.51.100.0/24\"]\n" + svc + "snat = \"never\"\nnode_port = 30080\nforward = \"dr\"\n"},
			[][2]string{{"lbd.toml:8:1", `service[0].snat: chooses masquerading, which only NAT does: with forward = "dr"`},
				{"lbd.toml:10:1", `service[0].forward: "dr" with node_port: NodePort-like services stay NAT`}}},
		{"tunnel keys without a tunnel", map[string]string{"lbd.toml": dr + "tunnel_type = \"gre\"\ntunnel_port = 6080\ntunnel_checksum = \"checksum\"\n" +
			"real_server = [{ address = \"10.0.0.1\", tunnel_type = \"ipip\" }]\n"},
			[][2]string{{"lbd.toml:7:1", `service[0].tunnel_type: is only for tunnels, and this service forwards by dr; expected forward = "tun" or no tunnel_type`},
				{"lbd.toml:8:1", "service[0].tunnel_port: is only for tunnels"}, {"lbd.toml:9:1", "service[0].tunnel_checksum: is only for tunnels"},
				{"lbd.toml:10:", "real_server[0].tunnel_type: is only for tunnels, and this real server forwards by dr"}}},
		{"options the encapsulation lacks", map[string]string{"lbd.toml": svc + "forward = \"tun\"\ntunnel_port = 6080\ntunnel_checksum = \"remote\"\n" +
			"real_server = [{ address = \"10.0.0.1\", tunnel_type = \"gue\" }, { address = \"10.0.0.2\", tunnel_type = \"gre\", tunnel_port = 1 }]\n"},
			[][2]string{{"lbd.toml:7:1", "tunnel_port: is GUE's UDP port, and this service's tunnel is ipip"},
				{"lbd.toml:8:1", "tunnel_checksum: IPIP has no checksum option"},
				{"lbd.toml:9:", `real_server[0].tunnel_type: "gue" needs the UDP port the real servers receive GUE on`},
				{"lbd.toml:9:", "real_server[1].tunnel_port: is GUE's UDP port, and this real server's tunnel is gre"}}},
		{"GRE has no remote checksum", map[string]string{"lbd.toml": svc + "forward = \"tun\"\ntunnel_type = \"gre\"\ntunnel_checksum = \"remote\"\n"},
			[][2]string{{"lbd.toml:8:1", `service[0].tunnel_checksum: "remote" (remote checksum offload) is GUE's only`}}},
		{"gue without a port", map[string]string{"lbd.toml": svc + "forward = \"tun\"\ntunnel_type = \"gue\"\n"},
			[][2]string{{"lbd.toml:7:1", `service[0].tunnel_type: "gue" needs the UDP port`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, errorLines(t, tt.files), tt.want)
			loadBoth(t, writeConfig(t, tt.files))
		})
	}
}

// TestForwardConsul checks the two ways Consul meets a forwarding method:
// a file's DR service takes Consul's instances at its own port, and a
// Consul-defined service is NAT only.
func TestForwardConsul(t *testing.T) {
	cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": dr + "[service.consul]\nservice = \"web\"\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Services[0]; s.Consul.Port != 80 || s.Forward.Method != lvs.DR {
		t.Errorf("consul port %d, forward %v; want the service's port 80 for DR, and dr", s.Consul.Port, s.Forward)
	}
	c := Defaults()
	c.Files = []string{"/etc/lbd/lbd.toml"}
	c.Consul.VirtualServices.VIPPools = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}
	_, err = ServiceFromConsul(&c, "api", map[string]string{"lbd-vip": "198.51.100.10", "lbd-port": "80", "lbd-forward": "dr"})
	if err == nil || !strings.Contains(err.Error(), "meta lbd-forward: Consul-defined virtual services forward by NAT only") {
		t.Errorf("lbd-forward: %v", err)
	}
}

// TestForwardExamples loads the annotated examples of DR, tunnels and
// firewall-mark services.
func TestForwardExamples(t *testing.T) {
	for _, tt := range []struct {
		path string
		want map[lvs.Method]int // real servers per method
	}{
		{"../examples/forwarding/dr.toml", map[lvs.Method]int{lvs.DR: 5}},
		{"../examples/forwarding/tunnel.toml", map[lvs.Method]int{lvs.Tunnel: 4, lvs.DR: 1}},
		{"../examples/forwarding/fwmark.toml", map[lvs.Method]int{lvs.NAT: 4, lvs.DR: 2}},
	} {
		t.Run(tt.path, func(t *testing.T) {
			cfg, err := Load(tt.path)
			if err != nil {
				t.Fatalf("the example does not load:\n%v", err)
			}
			if len(cfg.Files) != 1 {
				t.Errorf("files %v; want the example alone", cfg.Files)
			}
			got := map[lvs.Method]int{}
			for _, s := range cfg.Services {
				for _, r := range s.RealServers {
					got[r.Forward.Method]++
				}
			}
			if len(got) != len(tt.want) {
				t.Errorf("real servers per method %v; want %v", got, tt.want)
			}
			for m, n := range tt.want {
				if got[m] != n {
					t.Errorf("real servers per method %v; want %v", got, tt.want)
				}
			}
			loadBoth(t, tt.path)
		})
	}
}
