package config

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// marked is a firewall-mark service lbd marks itself (80, 443 and a
// range on one VIP); its last line is line 7.
const marked = `
[[service]]
name = "web"
fwmark = 7
vips = ["192.0.2.10"]
ports = [80, "443", "8000-8010"]
health_check = { type = "tcp", port = 80 }
`

// TestFWMarkServices checks what the two forms decode to: the mark, the
// ports lbd marks, the family, and real servers without a port.
func TestFWMarkServices(t *testing.T) {
	tests := []struct {
		name, text string
		mark       uint32
		ports      []PortRange
		family     int
		vips       int
		sorry      string
	}{
		{"lbd marks 80, 443 and a range", marked + "session_affinity = true\nreal_server = [{ address = \"10.0.0.1\" }, { address = \"10.0.0.2\", port = 0 }]\n",
			7, []PortRange{{80, 80}, {443, 443}, {8000, 8010}}, 4, 1, ""},
		{"the admin's own mark, family from the real servers", "[[service]]\nname = \"own\"\nfwmark = 4294950911\nhealth_check = { type = \"none\" }\nreal_server = [{ address = \"2001:db8::5\" }]\n",
			0xffffbfff, nil, 6, 0, ""},
		{"the admin's own mark, family written, a sorry server without a port", "[[service]]\nname = \"own\"\nfwmark = 9\nfamily = \"ipv6\"\nsorry_server = \"2001:db8::99\"\n",
			9, nil, 6, 0, "[2001:db8::99]:0"},
		{"direct routing, IPv6 VIPs", "[[service]]\nname = \"dr\"\nfwmark = 3\nvips = [\"2001:db8::10\"]\nports = [\"80\"]\nprotocol = \"udp\"\nforward = \"dr\"\nreal_server = [{ address = \"2001:db8:1::5\" }]\n",
			3, []PortRange{{80, 80}}, 6, 1, ""},
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
			if s.FWMark != tt.mark || !slices.Equal(s.MarkPorts, tt.ports) || s.Family() != tt.family || len(s.VIPs) != tt.vips || s.Port != 0 {
				t.Errorf("mark %d ports %v family %d vips %v port %d; want %d %v %d, %d VIPs, port 0", s.FWMark, s.MarkPorts, s.Family(), s.VIPs, s.Port, tt.mark, tt.ports, tt.family, tt.vips)
			}
			for i, r := range s.RealServers {
				if r.Port != 0 {
					t.Errorf("real server %d: port %d; want 0 (the packet's own)", i, r.Port)
				}
			}
			if got := ""; s.SorryServer != nil || tt.sorry != "" {
				if s.SorryServer != nil {
					got = s.SorryServer.String()
				}
				if got != tt.sorry {
					t.Errorf("sorry server %q; want %q", got, tt.sorry)
				}
			}
		})
	}
}

// TestFWMarkRefused checks each rule of firewall-mark services: every
// problem at once, at its file:line, saying what is expected.
func TestFWMarkRefused(t *testing.T) {
	own := "[[service]]\nname = \"own\"\nfwmark = 9\nhealth_check = { type = \"none\" }\n" // line 5
	tests := []invalidConfig{
		{"port, node_port, a real server's port", map[string]string{"lbd.toml": marked + "port = 80\nnode_port = 30080\nreal_server = [{ address = \"10.0.0.1\", port = 8080 }]\n"},
			[][2]string{{"lbd.toml:8:1", "service[0].port: with fwmark: a firewall-mark service spans ports; expected ports = [...]"},
				{"lbd.toml:9:1", "service[0].node_port: with fwmark: NodePort-like services are VIP:port services"},
				{"lbd.toml:10:", "real_server[0].port: 8080: a firewall-mark service's real servers take the packet's own destination port"}}},
		{"ports without vips, vips without ports", map[string]string{"lbd.toml": own + "ports = [80]\nreal_server = [{ address = \"10.0.0.1\" }]\n" +
			"[[service]]\nname = \"b\"\nfwmark = 10\nvips = [\"192.0.2.11\"]\nhealth_check = { type = \"none\" }\n"},
			[][2]string{{"lbd.toml:5:1", "service[0].ports: are the ports lbd marks on the service's VIPs, and it has none"},
				{"lbd.toml:10:1", "service[1].vips: of a firewall-mark service need ports: lbd marks packets to VIP:port itself"}}},
		{"bad marks and ports", map[string]string{"lbd.toml": "[[service]]\nname = \"a\"\nfwmark = 0\n" +
			"[[service]]\nname = \"b\"\nfwmark = 1\nvips = [\"192.0.2.11\"]\nports = [0, \"x\", \"90-80\", \"8000-8100\", 8050, []]\nhealth_check = { type = \"none\" }\n"},
			[][2]string{{"lbd.toml:3:1", "service[0].fwmark: 0 is out of range; expected an integer from 1 to 4294967295"},
				{"lbd.toml:1:1", `firewall-mark service "a" has no VIPs and no real servers`},
				{"lbd.toml:8:", "ports[0]: 0 is not a port or range"}, {"lbd.toml:8:", "ports[1]: x is not a port or range"},
				{"lbd.toml:8:", "ports[2]: 90-80 is not a port or range"}, {"lbd.toml:8:", "ports[4]: 8050 overlaps 8000-8100 (ports[3]); expected each port once"},
				{"lbd.toml:8:", "ports[5]: is an array; expected ports (1-65535)"}}},
		{"the same mark twice in a family; the other family is another service", map[string]string{"lbd.toml": own + "family = \"ipv4\"\n" +
			"[[service]]\nname = \"b\"\nfwmark = 9\nvips = [\"192.0.2.11\"]\nports = [80]\nhealth_check = { type = \"none\" }\n" +
			"[[service]]\nname = \"c\"\nfwmark = 9\nfamily = \"ipv6\"\nhealth_check = { type = \"none\" }\n"},
			[][2]string{{"lbd.toml:8:1", `service[1].fwmark: 9 is the mark of service "own" too (at `}}},
		{"the masquerade bit", map[string]string{"lbd.toml": "[dataplane]\nmasquerade_bit = 3\n" + own + "family = \"ipv4\"\n" +
			"[[service]]\nname = \"b\"\nfwmark = 0x4000\nfamily = \"ipv4\"\nhealth_check = { type = \"none\" }\n"},
			[][2]string{{"lbd.toml:5:1", "service[0].fwmark: 9 (0x9) has bit 3 set, lbd's masquerade bit ([dataplane] masquerade_bit = 3)"}}},
		{"a marked VIP:port served by a VIP:port service too", map[string]string{"lbd.toml": marked + "real_server = [{ address = \"10.0.0.1\" }]\n" +
			"[[service]]\nname = \"tls\"\nvips = [\"192.0.2.10\"]\nport = 443\n"},
			[][2]string{{"lbd.toml:11:", `192.0.2.10:443/tcp is claimed by service "tls" here and by service "web" at `}}},
		{"what needs VIPs, Consul, keys without fwmark, family against the VIPs", map[string]string{"lbd.toml": own + "family = \"ipv4\"\n" +
			"source_ranges = [\"10.0.0.0/8\"]\nannounce = \"route\"\n[service.consul]\nservice = \"x\"\n[service.consul_register]\n" +
			"[[service]]\nname = \"b\"\nvips = [\"192.0.2.11\"]\nport = 80\nports = [80]\nfamily = \"ipv4\"\n" +
			"[[service]]\nname = \"c\"\nfwmark = 3\nvips = [\"192.0.2.12\"]\nports = [80]\nfamily = \"ipv6\"\nhealth_check = { type = \"none\" }\n"},
			[][2]string{{"lbd.toml:6:1", "service[0].source_ranges: filters clients per VIP:port, and with your own marks lbd knows no VIP:port"},
				{"lbd.toml:7:1", "service[0].announce: announces VIPs"}, {"lbd.toml:10:1", "service[0].consul_register: registers VIPs"},
				{"lbd.toml:8:1", "service[0].consul: real servers from Consul are not supported for firewall-mark services"},
				{"lbd.toml:15:1", "service[1].ports: is only for firewall-mark services"}, {"lbd.toml:16:1", "service[1].family: is only for firewall-mark services"},
				{"lbd.toml:22:1", `service[2].family: "ipv6" but the VIPs are IPv4; expected no family`}}},
		{"checks need a port", map[string]string{"lbd.toml": "[[service]]\nname = \"a\"\nfwmark = 1\nfamily = \"ipv4\"\nreal_server = [{ address = \"10.0.0.1\" }, { address = \"10.0.0.2\" }]\n" +
			"[[service]]\nname = \"b\"\nfwmark = 2\nhealth_check = { type = \"none\" }\n[[service.real_server]]\naddress = \"10.0.0.3\"\nhealth_check = { type = \"http\" }\n"},
			[][2]string{{"lbd.toml:1:1", "service[0]: a tcp check of a firewall-mark service needs the port to check"},
				{"lbd.toml:12:", "service[1].real_server[0].health_check: a http check of a firewall-mark service's real server needs a port"}}},
		{"a sorry server with a port", map[string]string{"lbd.toml": own + "family = \"ipv4\"\nsorry_server = \"10.0.0.99:80\"\n"},
			[][2]string{{"lbd.toml:6:1", `service[0].sorry_server: "10.0.0.99:80": a firewall-mark service's sorry server takes the packet's own port`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, errorLines(t, tt.files), tt.want)
			loadBoth(t, writeConfig(t, tt.files))
		})
	}
}

// TestFWMarkClaimsBothWays checks that a marked port and a VIP:port
// service's port collide whichever comes first, and that ports outside
// the marked ones stay free.
func TestFWMarkClaimsBothWays(t *testing.T) {
	plain := "[[service]]\nname = \"plain\"\nvips = [\"192.0.2.10\"]\nport = 8005\nhealth_check = { type = \"none\" }\n"
	expectErrors(t, errorLines(t, map[string]string{"lbd.toml": plain + marked}), [][2]string{{"lbd.toml:10:", `192.0.2.10:8005/tcp is claimed by service "web" here and by service "plain"`}})
	free := "[[service]]\nname = \"plain\"\nvips = [\"192.0.2.10\"]\nport = 8011\nhealth_check = { type = \"none\" }\n"
	cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": free + marked}))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Services[1]; s.FWMark != 7 || s.Protocol != lvs.TCP || s.VIPs[0] != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("service %+v", s)
	}
}
