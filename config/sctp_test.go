package config

import (
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// TestSCTPServices checks what an SCTP service decodes to: its protocol,
// its default check (an SCTP connect, as TCP services get a TCP one), and
// checks written for it or for its real servers.
func TestSCTPServices(t *testing.T) {
	const sig = "[[service]]\nname = \"sig\"\nvips = [\"192.0.2.10\"]\nport = 2905\nprotocol = \"sctp\"\n"
	for _, tt := range []struct {
		name, text string
		proto      lvs.Protocol
		check      CheckType // the service's
		rsCheck    CheckType // its first real server's
		checkPort  uint16
	}{
		{"default check", sig + "real_server = [{ address = \"10.0.0.1\" }]\n", lvs.SCTP, CheckSCTP, CheckSCTP, 0},
		{"direct routing", sig + "forward = \"dr\"\nreal_server = [{ address = \"10.0.0.1\" }]\n", lvs.SCTP, CheckSCTP, CheckSCTP, 0},
		{"check on another port", sig + "health_check = { type = \"sctp\", port = 2906, interval = \"500ms\" }\nreal_server = [{ address = \"10.0.0.1\" }]\n",
			lvs.SCTP, CheckSCTP, CheckSCTP, 2906},
		// A server that speaks both (Diameter over TCP and SCTP on 3868)
		// may be checked over either.
		{"tcp check of an SCTP service", sig + "health_check = { type = \"tcp\" }\nreal_server = [{ address = \"10.0.0.1\" }]\n",
			lvs.SCTP, CheckTCP, CheckTCP, 0},
		{"sctp check of a TCP service", "[[service]]\nname = \"dia\"\nvips = [\"192.0.2.10\"]\nport = 3868\nhealth_check = { type = \"sctp\" }\nreal_server = [{ address = \"10.0.0.1\" }]\n",
			lvs.TCP, CheckSCTP, CheckSCTP, 0},
		{"a real server's own check", sig + "[[service.real_server]]\naddress = \"10.0.0.1\"\nhealth_check = { type = \"exec\", command = [\"/bin/true\"] }\n",
			lvs.SCTP, CheckSCTP, CheckExec, 0},
		{"no check", sig + "health_check = { type = \"none\" }\nreal_server = [{ address = \"10.0.0.1\" }]\n", lvs.SCTP, CheckNone, CheckNone, 0},
		{"firewall-mark service of SCTP ports", "[[service]]\nname = \"m\"\nfwmark = 5\nvips = [\"192.0.2.10\"]\nports = [2905, 2906]\nprotocol = \"sctp\"\n" +
			"health_check = { port = 2905 }\nreal_server = [{ address = \"10.0.0.1\" }]\n", lvs.SCTP, CheckSCTP, CheckSCTP, 2905},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(tt.text)})
			if err != nil {
				t.Fatal(err)
			}
			s := cfg.Services[0]
			if s.Protocol != tt.proto || s.HealthCheck.Type != tt.check || s.HealthCheck.Port != tt.checkPort {
				t.Errorf("protocol %q, check %q port %d; want %q, %q, %d", s.Protocol, s.HealthCheck.Type, s.HealthCheck.Port, tt.proto, tt.check, tt.checkPort)
			}
			if got := s.RealServers[0].HealthCheck.Type; got != tt.rsCheck {
				t.Errorf("real server's check %q, want %q", got, tt.rsCheck)
			}
		})
	}
}

// TestSCTPRefused checks what an SCTP service or check cannot have, each
// at its file:line: the same VIP:port/sctp twice (the same VIP:port in
// TCP and SCTP is two virtual servers), keys of other check types.
func TestSCTPRefused(t *testing.T) {
	sig := func(name string) string {
		return "[[service]]\nname = \"" + name + "\"\nvips = [\"192.0.2.10\"]\nport = 2905\nprotocol = \"sctp\"\n"
	}
	tests := []invalidConfig{
		{"VIP:port/sctp twice", map[string]string{"lbd.toml": sig("a") + sig("b") +
			"[[service]]\nname = \"c\"\nvips = [\"192.0.2.10\"]\nport = 2905\n"}, // TCP: another virtual server
			[][2]string{{"lbd.toml:8:", `192.0.2.10:2905/sctp is claimed by service "b" here and by service "a" at `}}},
		{"keys of other checks", map[string]string{"lbd.toml": sig("a") + "health_check = { type = \"sctp\", payload = \"x\", path = \"/\" }\n"},
			[][2]string{{"lbd.toml:6:", `health_check.payload: applies only to "udp" checks, and this check is type = "sctp"`},
				{"lbd.toml:6:", `health_check.path: applies only to "http" and "https" checks, and this check is type = "sctp"`}}},
		{"firewall-mark service's sctp check without a port", map[string]string{"lbd.toml": "[[service]]\nname = \"m\"\nfwmark = 5\nvips = [\"192.0.2.10\"]\n" +
			"ports = [2905]\nprotocol = \"sctp\"\nreal_server = [{ address = \"10.0.0.1\" }]\n"},
			[][2]string{{"lbd.toml:1:1", "service[0]: a sctp check of a firewall-mark service needs the port to check"}}},
		{"check type misspelt", map[string]string{"lbd.toml": sig("a") + "health_check = { type = \"SCTP\" }\n"},
			[][2]string{{"lbd.toml:6:", `"SCTP" is not accepted (did you mean "sctp"?); expected one of: none, tcp, http, https, udp, dns, exec, sctp`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, errorLines(t, tt.files), tt.want)
		})
	}
}

// TestSCTPFromConsul checks a Consul-defined SCTP virtual service
// (lbd-protocol = "sctp"): decoded as a file's, by Consul's health.
func TestSCTPFromConsul(t *testing.T) {
	cfg := Defaults()
	cfg.Files = []string{"/etc/lbd/lbd.toml"}
	cfg.Consul.VirtualServices = ConsulVirtualServices{Tag: "lbd", VIPPools: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}
	s, err := ServiceFromConsul(&cfg, "sig", map[string]string{"lbd-vip": "198.51.100.10", "lbd-port": "2905", "lbd-protocol": "sctp"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Protocol != lvs.SCTP || s.Port != 2905 || s.Consul == nil || s.Consul.OwnChecks {
		t.Errorf("service %+v; want SCTP on 2905, its real servers by Consul's health", s)
	}
}

// TestSCTPExample loads the annotated SCTP example: NAT with the default
// check, direct routing with a written one.
func TestSCTPExample(t *testing.T) {
	const path = "../examples/sctp/sctp.toml"
	cfg, err := Load(path)
	if err != nil {
		t.Fatalf("the example does not load:\n%v", err)
	}
	if len(cfg.Services) != 2 {
		t.Fatalf("%d services; want 2", len(cfg.Services))
	}
	for i, want := range []lvs.Method{lvs.NAT, lvs.DR} {
		s := cfg.Services[i]
		if s.Protocol != lvs.SCTP || s.HealthCheck.Type != CheckSCTP || s.Forward.Method != want {
			t.Errorf("service %s: protocol %q, check %q, forward %v; want sctp, sctp, %v", s.Name, s.Protocol, s.HealthCheck.Type, s.Forward.Method, want)
		}
	}
	loadBoth(t, path)
}
