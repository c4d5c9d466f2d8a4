package config

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

// writeConfig writes files (names relative to a fresh /etc/lbd-like
// directory; "lbd.toml" is the main file) and returns the main file's path.
func writeConfig(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "lbd.toml")
}

// errorLines loads the configuration and returns its errors with the
// temporary directory cut from their file names.
func errorLines(t *testing.T, files map[string]string) []string {
	t.Helper()
	path := writeConfig(t, files)
	cfg, err := Load(path)
	if err == nil {
		t.Fatalf("loaded without error: %+v", cfg)
	}
	if cfg != nil {
		t.Errorf("returned a configuration along with errors")
	}
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("error is %T, not an ErrorList: %v", err, err)
	}
	var out []string
	for _, e := range list {
		out = append(out, strings.TrimPrefix(e.Error(), filepath.Dir(path)+"/"))
	}
	return out
}

const svc = `
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
`

// invalidConfig is a configuration that must not load.
type invalidConfig struct {
	name  string
	files map[string]string
	// want holds, per expected error, "file:line" and a fragment of the
	// message; every error must be expected and vice versa.
	want [][2]string
}

var invalidConfigs = []invalidConfig{
	{"syntax error", map[string]string{"lbd.toml": "[sync]\nburst = = 2\n"},
		[][2]string{{"lbd.toml:2:", "TOML syntax error"}}},
	{"syntax error in drop-in and main", map[string]string{
		"lbd.toml":         "a = \"unterminated\n",
		"conf.d/10-x.toml": svc + "port = 80\n"},
		[][2]string{{"lbd.toml:1:", "TOML syntax error"}, {"conf.d/10-x.toml:6:", "TOML syntax error"}}},
	{"unknown top-level key", map[string]string{"lbd.toml": "[synk]\nburst = 2\n"},
		[][2]string{{"lbd.toml:1:1", `synk: unknown key (did you mean "sync"?)`}}},
	{"unknown key in service", map[string]string{"lbd.toml": svc + "schedular = \"rr\"\n"},
		[][2]string{{"lbd.toml:6:1", `service[0].schedular: unknown key (did you mean "scheduler"?); accepted in [service]`}}},
	{"unknown key in real server", map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"10.0.0.1\"\nwieght = 2\n"},
		[][2]string{{"lbd.toml:8:1", `service[0].real_server[0].wieght: unknown key (did you mean "weight"?)`}}},
	{"consul virtual services without tag", map[string]string{"lbd.toml": "[consul.virtual_services]\nvip_pools = [\"198.51.100.0/24\"]\n"},
		[][2]string{{"lbd.toml:1:", `consul.virtual_services: names no tag`}}},
	{"consul virtual services without pools", map[string]string{"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\n"},
		[][2]string{{"lbd.toml:1:", `consul.virtual_services: has no vip_pools`}, {"lbd.toml:1:", `consul.virtual_services: has no real_server_networks; expected real_server_networks = ["10.0.0.0/8"]`}}},
	{"consul virtual services bad pool", map[string]string{"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = [\"198.51.100.0/33\"]\nreal_server_networks = [\"10.0.0.0/8\"]\n"},
		[][2]string{{"lbd.toml:3:", `consul.virtual_services.vip_pools[0]`}}},
	{"consul register bad name", map[string]string{"lbd.toml": svc + "[service.consul_register]\nname = \"bad name\"\n"},
		[][2]string{{"lbd.toml:7:", `service[0].consul_register.name: "bad name" is not a valid Consul service name`}}},
	{"consul register unknown key", map[string]string{"lbd.toml": svc + "[service.consul_register]\ntag = [\"a\"]\n"},
		[][2]string{{"lbd.toml:7:", `service[0].consul_register.tag: unknown key (did you mean "tags"?)`}}},
	{"consul register NodePort-only", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"10.0.0.0/8\"]\n[[service]]\nname = \"n\"\nnode_port = 30080\nreal_server = [{address = \"10.1.0.1\", port = 80}]\n[service.consul_register]\n"},
		[][2]string{{"lbd.toml:", `has no VIP to register`}}},
	{"unknown key in health check", map[string]string{"lbd.toml": svc + "[service.health_check]\nintervall = \"1s\"\n"},
		[][2]string{{"lbd.toml:7:1", `service[0].health_check.intervall: unknown key (did you mean "interval"?)`}}},
	{"bad duration", map[string]string{"lbd.toml": "[sync]\nsync_period = \"30 seconds\"\n"},
		[][2]string{{"lbd.toml:2:1", `sync.sync_period: "30 seconds" is not a duration; expected a duration`}}},
	{"duration as integer", map[string]string{"lbd.toml": "[sync]\nmin_sync_period = 1\n"},
		[][2]string{{"lbd.toml:2:1", `sync.min_sync_period: is an integer; expected a duration`}}},
	{"min above sync period", map[string]string{"lbd.toml": "[sync]\nmin_sync_period = \"1m\"\nsync_period = \"30s\"\n"},
		[][2]string{{"lbd.toml:2:1", "1m0s is longer than sync_period (30s)"}}},
	{"burst out of range", map[string]string{"lbd.toml": "[sync]\nburst = 0\n"},
		[][2]string{{"lbd.toml:2:1", "sync.burst: 0 is out of range; expected an integer from 1 to 100"}}},
	{"delete fraction out of range", map[string]string{"lbd.toml": "[sync]\nmax_delete_fraction = 1.5\n"},
		[][2]string{{"lbd.toml:2:1", "1.5 is out of range; expected a number from 0 to 1"}}},
	{"bad interface name", map[string]string{"lbd.toml": "[dataplane]\ninterface = \"a-very-long-interface-name\"\n"},
		[][2]string{{"lbd.toml:2:1", "is not a valid interface name"}}},
	{"masquerade bit out of range", map[string]string{"lbd.toml": "[dataplane]\nmasquerade_bit = 32\n"},
		[][2]string{{"lbd.toml:2:1", "32 is out of range; expected an integer from 0 to 31"}}},
	{"cidr with host bits", map[string]string{"lbd.toml": "[dataplane]\nlocal_networks = [\n  \"10.0.0.0/8\",\n  \"10.1.2.3/16\",\n]\n"},
		[][2]string{{"lbd.toml:4:3", `dataplane.local_networks[1]: "10.1.2.3/16" has host bits set; expected the network address, "10.1.0.0/16"`}}},
	{"not a cidr", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"10.0.0.1\"]\n"},
		[][2]string{{"lbd.toml:2:15", `"10.0.0.1" is not a CIDR`}}},
	{"loopback node cidr", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"127.0.0.0/8\"]\n"},
		[][2]string{{"lbd.toml:2:15", "127.0.0.0/8 never holds node addresses"}}},
	{"single string where array expected", map[string]string{"lbd.toml": "[dataplane]\nlocal_networks = \"10.0.0.0/8\"\n"},
		[][2]string{{"lbd.toml:2:1", "is a string; expected an array of CIDRs"}}},
	{"bad port range", map[string]string{"lbd.toml": "[dataplane]\nnode_port_range = \"32767-30000\"\n"},
		[][2]string{{"lbd.toml:2:1", `"32767-30000" is not a port range`}}},
	{"fractional ipvs timeout", map[string]string{"lbd.toml": "[ipvs]\ntcp_timeout = \"1.5s\"\n"},
		[][2]string{{"lbd.toml:2:1", "is not a whole number of seconds"}}},
	{"relative socket", map[string]string{"lbd.toml": "[status]\nsocket = \"lbd.sock\"\n"},
		[][2]string{{"lbd.toml:2:1", `"lbd.sock" is not an absolute path`}}},
	{"bad metrics address", map[string]string{"lbd.toml": "[status]\nmetrics_listen = \"localhost\"\n"},
		[][2]string{{"lbd.toml:2:1", `"localhost" is not HOST:PORT`}}},
	{"consul scheme and tls", map[string]string{"lbd.toml": "[consul]\nscheme = \"ftp\"\n[consul.tls]\ncert_file = \"/c.pem\"\n"},
		[][2]string{{"lbd.toml:2:1", `"ftp" is not accepted; expected one of: http, https`}, {"lbd.toml:4:1", "needs both cert_file and key_file"}}},
	{"consul relative token file", map[string]string{"lbd.toml": "[consul]\ntoken_file = \"token\"\n"},
		[][2]string{{"lbd.toml:2:1", `"token" is not an absolute path`}}},
	{"global table in drop-in", map[string]string{"lbd.toml": "", "conf.d/x.toml": "[sync]\nburst = 3\n" + svc},
		[][2]string{{"conf.d/x.toml:1:1", "global settings are accepted only in the main file"}}},
	{"service without name", map[string]string{"lbd.toml": "[[service]]\nvips = [\"192.0.2.1\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:1:1", "service has no name"}}},
	{"bad service name", map[string]string{"lbd.toml": "[[service]]\nname = \"web site\"\nvips = [\"192.0.2.1\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:2:1", `"web site" is not a valid service name`}}},
	{"duplicate service name across files", map[string]string{"lbd.toml": svc, "conf.d/a.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.11\"]\nport = 80\n"},
		[][2]string{{"conf.d/a.toml:2:1", `service name "web" is already used by the service at `}}},
	{"same VIP:port/proto in two files", map[string]string{"lbd.toml": svc, "conf.d/a.toml": "[[service]]\nname = \"web2\"\nvips = [\"192.0.2.99\", \"192.0.2.10\"]\nport = 80\n"},
		[][2]string{{"conf.d/a.toml:3:23", `192.0.2.10:80/tcp is claimed by service "web2" here and by service "web" at `}}},
	{"unknown protocol", map[string]string{"lbd.toml": svc + "protocol = \"TCP\"\n"},
		[][2]string{{"lbd.toml:6:1", `"TCP" is not accepted (did you mean "tcp"?); expected one of: tcp, udp, sctp`}}},
	{"protocol IPVS has but lbd does not", map[string]string{"lbd.toml": svc + "protocol = \"dccp\"\n"},
		[][2]string{{"lbd.toml:6:1", `"dccp" is not accepted; expected one of: tcp, udp, sctp`}}},
	{"unknown scheduler", map[string]string{"lbd.toml": svc + "scheduler = \"lblc\"\n"},
		[][2]string{{"lbd.toml:6:1", `"lblc" is not accepted`}}},
	{"flag of another scheduler", map[string]string{"lbd.toml": svc + "scheduler = \"mh\"\nscheduler_flags = [\"sh-port\"]\n"},
		[][2]string{{"lbd.toml:7:20", `"sh-port" is not a flag of scheduler "mh"; expected one of: mh-fallback, mh-port`}}},
	{"flags on a scheduler without flags", map[string]string{"lbd.toml": svc + "scheduler_flags = [\"sh-port\"]\n"},
		[][2]string{{"lbd.toml:6:20", `scheduler "wrr" takes no flags`}}},
	{"port out of range", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.1\"]\nport = 70000\n"},
		[][2]string{{"lbd.toml:4:1", "service[0].port: 70000 is out of range; expected an integer from 1 to 65535"}}},
	{"port as string", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.1\"]\nport = \"80\"\n"},
		[][2]string{{"lbd.toml:4:1", "is a string; expected an integer from 1 to 65535"}}},
	{"bad VIP", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.300\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:3:9", `"192.0.2.300" is not an IP address`}}},
	{"loopback VIP", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"127.0.0.5\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:3:9", "127.0.0.5 is not a unicast address a client can reach"}}},
	{"mixed VIP families", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.1\", \"2001:db8::1\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:3:22", "2001:db8::1 is IPv6 but the first VIP 192.0.2.1 is IPv4"}}},
	{"duplicate VIP in one service", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"192.0.2.1\", \"192.0.2.1\"]\nport = 80\n"},
		[][2]string{{"lbd.toml:3:22", "192.0.2.1 is listed twice (also vips[0])"}}},
	{"service reachable nowhere", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\n"},
		[][2]string{{"lbd.toml:1:1", `service "web" is reachable nowhere`}}},
	{"port without vips", map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nport = 80\n"},
		[][2]string{{"lbd.toml:3:1", "has a port but no vips"}}},
	{"real server of the other family", map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"2001:db8::5\"\n"},
		[][2]string{{"lbd.toml:7:1", "2001:db8::5 is IPv6 but service \"web\" is IPv4; IPVS NAT cannot mix families"}}},
	{"IPv6 service with an IPv4 real server", map[string]string{"lbd.toml": "[[service]]\nname = \"v6\"\nvips = [\"2001:db8::10\"]\nport = 443\n[[service.real_server]]\naddress = \"10.0.0.5\"\n"},
		[][2]string{{"lbd.toml:6:1", "10.0.0.5 is IPv4 but service \"v6\" is IPv6"}}},
	{"real server without address", map[string]string{"lbd.toml": svc + "[[service.real_server]]\nport = 8080\n"},
		[][2]string{{"lbd.toml:6:1", "real server has no address"}}},
	{"loopback real server", map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"127.0.0.1\"\n"},
		[][2]string{{"lbd.toml:7:1", "127.0.0.1 is not a routable unicast address"}}},
	{"duplicate real servers", map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"10.0.0.1\"\n[[service.real_server]]\naddress = \"10.0.0.1\"\nport = 80\n"},
		[][2]string{{"lbd.toml:9:1", "real server 10.0.0.1:80 is listed twice (first at "}}},
	{"weight out of range", map[string]string{"lbd.toml": svc + "real_server = [{ address = \"10.0.0.1\", weight = -1 }]\n"},
		[][2]string{{"lbd.toml:6:40", "service[0].real_server[0].weight: -1 is out of range"}}},
	{"node port without node cidrs", map[string]string{"lbd.toml": "[[service]]\nname = \"np\"\nnode_port = 30080\n[[service.real_server]]\naddress = \"10.0.0.1\"\nport = 80\n"},
		[][2]string{{"lbd.toml:3:1", `service "np" is NodePort-like but no node addresses are configured`}}},
	{"node port outside range", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"198.51.100.0/24\"]\n[[service]]\nname = \"np\"\nnode_port = 8080\nreal_server = [{address = \"10.0.0.1\", port = 80}]\n"},
		[][2]string{{"lbd.toml:5:1", "8080 is outside node_port_range 30000-32767"}}},
	{"NodePort-only real server without port", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"198.51.100.0/24\"]\n[[service]]\nname = \"np\"\nnode_port = 30080\n[[service.real_server]]\naddress = \"10.0.0.1\"\n"},
		[][2]string{{"lbd.toml:6:1", "real server has no port and service \"np\" has none to inherit"}}},
	{"affinity timeout without affinity", map[string]string{"lbd.toml": svc + "session_affinity_timeout = \"1h\"\n"},
		[][2]string{{"lbd.toml:6:1", "has no effect without session_affinity = true"}}},
	{"affinity timeout too long", map[string]string{"lbd.toml": svc + "session_affinity = true\nsession_affinity_timeout = \"48h\"\n"},
		[][2]string{{"lbd.toml:7:1", "48h is out of range"}}},
	{"source range of the other family", map[string]string{"lbd.toml": svc + "source_ranges = [\"2001:db8::/32\"]\n"},
		[][2]string{{"lbd.toml:6:18", "2001:db8::/32 is IPv6 but the service is IPv4"}}},
	{"bad snat mode", map[string]string{"lbd.toml": svc + "snat = \"masquerade\"\n"},
		[][2]string{{"lbd.toml:6:1", `"masquerade" is not accepted; expected one of: auto, always, never`}}},
	{"arp without interface", map[string]string{"lbd.toml": svc + "announce = \"arp\"\n"},
		[][2]string{{"lbd.toml:6:1", "announce = \"arp\" needs the interface"}}},
	{"interface with route", map[string]string{"lbd.toml": svc + "announce_interface = \"eth0\"\n"},
		[][2]string{{"lbd.toml:6:1", "is only used with announce = \"arp\""}}},
	{"quorum never met", map[string]string{"lbd.toml": svc + "quorum = 3\nreal_server = [{address = \"10.0.0.1\"}, {address = \"10.0.0.2\"}]\n"},
		[][2]string{{"lbd.toml:6:1", "3 can never be met: service \"web\" has 2 real servers"}}},
	{"sorry fallback without sorry server", map[string]string{"lbd.toml": svc + "quorum_fallback = \"sorry\"\n"},
		[][2]string{{"lbd.toml:6:1", "\"sorry\" needs a sorry server"}}},
	{"sorry server unused", map[string]string{"lbd.toml": svc + "quorum_fallback = \"keep\"\nsorry_server = \"10.0.0.99:80\"\n"},
		[][2]string{{"lbd.toml:7:1", "is never used with quorum_fallback = \"keep\""}}},
	{"bad sorry server", map[string]string{"lbd.toml": svc + "sorry_server = \"10.0.0.99\"\n"},
		[][2]string{{"lbd.toml:6:1", `"10.0.0.99" is not ADDRESS:PORT`}}},
	{"unknown check type", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"icmp\"\n"},
		[][2]string{{"lbd.toml:7:1", `"icmp" is not accepted; expected one of: none, tcp, http, https, udp, dns, exec`}}},
	{"http key on a tcp check", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"tcp\"\npath = \"/healthz\"\n"},
		[][2]string{{"lbd.toml:8:1", `applies only to "http" and "https" checks, and this check is type = "tcp"`}}},
	{"timeout longer than interval", map[string]string{"lbd.toml": svc + "[service.health_check]\ninterval = \"1s\"\ntimeout = \"2s\"\n"},
		[][2]string{{"lbd.toml:8:1", "timeout (2s) is longer than interval (1s); expected timeout <= interval"}}},
	{"exec check with relative command", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"exec\"\ncommand = [\"check.sh\"]\n"},
		[][2]string{{"lbd.toml:8:1", "first element is an absolute path"}}},
	{"udp check without payload", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"udp\"\n"},
		[][2]string{{"lbd.toml:6:1", "a udp check needs payload"}}},
	{"bad status range", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"http\"\nexpect_status = [200, \"399-200\", 700]\n"},
		[][2]string{{"lbd.toml:8:23", "399-200 is not a status code or range"}, {"lbd.toml:8:34", "700 is not a status code or range"}}},
	{"dns rcode", map[string]string{"lbd.toml": svc + "[service.health_check]\ntype = \"dns\"\nquery_name = \"x.\"\nexpect_rcode = \"OK\"\n"},
		[][2]string{{"lbd.toml:9:1", `"OK" is not accepted`}}},
	{"real server override of wrong type", map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"10.0.0.1\"\n[service.real_server.health_check]\nrise = \"two\"\n"},
		[][2]string{{"lbd.toml:9:1", "service[0].real_server[0].health_check.rise: is a string; expected an integer from 1 to 100"}}},
	{"consul service without name", map[string]string{"lbd.toml": svc + "[service.consul]\ntags = [\"prod\"]\n"},
		[][2]string{{"lbd.toml:6:1", "names no Consul service"}}},
	{"many errors at once across files", map[string]string{
		"lbd.toml":       "[sync]\nburst = 0\n" + svc + "scheduler = \"fast\"\n",
		"conf.d/a.toml":  "[[service]]\nname = \"a\"\nvips = [\"192.0.2.2\"]\nport = 0\n",
		"conf.d/b.toml":  "[[service]]\nname = \"b\"\nvips = [\"nope\"]\nport = 53\nprotocol = \"icmp\"\n",
		"conf.d/c.txt":   "ignored: not a .toml file\n",
		"conf.d/.x.toml": "ignored: hidden\n",
		"conf.d/d.toml~": "ignored: backup\n"},
		[][2]string{
			{"conf.d/a.toml:4:1", "0 is out of range"},
			{"conf.d/b.toml:3:9", `"nope" is not an IP address`},
			{"conf.d/b.toml:5:1", `"icmp" is not accepted`},
			{"lbd.toml:2:1", "sync.burst: 0 is out of range"},
			{"lbd.toml:8:1", `"fast" is not accepted`},
		}},
}

func TestInvalidConfigs(t *testing.T) {
	for _, tt := range invalidConfigs {
		t.Run(tt.name, func(t *testing.T) {
			got := errorLines(t, tt.files)
			used := make([]bool, len(got))
			for _, w := range tt.want {
				found := false
				for i, g := range got {
					if !used[i] && strings.HasPrefix(g, w[0]) && strings.Contains(g, w[1]) {
						used[i], found = true, true
						break
					}
				}
				if !found {
					t.Errorf("missing error %s ... %s", w[0], w[1])
				}
			}
			for i, g := range got {
				if !used[i] {
					t.Errorf("unexpected error: %s", g)
				}
			}
		})
	}
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := Load("../examples/lbd.toml")
	if err != nil {
		t.Fatalf("the shipped example does not load:\n%v", err)
	}
	if len(cfg.Files) != 2 || len(cfg.Services) != 3 {
		t.Fatalf("files %v, %d services; want the main file and one drop-in with 3 services", cfg.Files, len(cfg.Services))
	}
	web, dns, api := cfg.Services[0], cfg.Services[1], cfg.Services[2]
	if web.Name != "web" || dns.Name != "dns" || api.Name != "api" {
		t.Fatalf("services in wrong order: %s, %s, %s", web.Name, dns.Name, api.Name)
	}
	if got := web.RealServers[1].HealthCheck; got.Port != 8081 || got.Path != "/healthz" || got.Type != CheckHTTP {
		t.Errorf("real server override not applied over the service check: %+v", got)
	}
	if web.RealServers[0].HealthCheck.Port != 0 {
		t.Errorf("override leaked to another real server")
	}
	if dns.RealServers[0].Port != 53 || dns.Protocol != lvs.UDP || len(dns.VIPs) != 2 {
		t.Errorf("dns: %+v", dns)
	}
	if !api.SessionAffinity || api.SessionAffinityTimeout != 3*time.Hour || api.NodePort != 30443 {
		t.Errorf("api: %+v", api)
	}
	if api.Pos.File != "../examples/conf.d/dns.toml" || api.Pos.Line == 0 {
		t.Errorf("api provenance = %v", api.Pos)
	}
}

func TestDefaults(t *testing.T) {
	path := writeConfig(t, map[string]string{"lbd.toml": svc + "[[service.real_server]]\naddress = \"10.0.0.1\"\n" +
		"[[service]]\nname = \"u\"\nvips = [\"2001:db8::53\"]\nport = 53\nprotocol = \"udp\"\nreal_server = [{address = \"2001:db8:1::5\"}]\n"})
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Dataplane
	if d.Interface != "lbd0" || d.MasqueradeMark() != 0x4000 || !d.StrictARP || d.NodePortMin != 30000 || d.NodePortMax != 32767 || len(d.NodeCIDRs) != 0 {
		t.Errorf("dataplane defaults: %+v", d)
	}
	if cfg.Sync.MinSyncPeriod != time.Second || cfg.Sync.SyncPeriod != 30*time.Second || cfg.Sync.Burst != 2 {
		t.Errorf("sync defaults: %+v", cfg.Sync)
	}
	if cfg.Consul.Enabled {
		t.Errorf("consul enabled without a [consul] table or a Consul-backed service")
	}
	web, u := cfg.Services[0], cfg.Services[1]
	if web.Scheduler != "wrr" || web.Protocol != lvs.TCP || web.SNAT != SNATAuto || web.Announce != AnnounceRoute ||
		web.SessionAffinity || web.SessionAffinityTimeout != 10800*time.Second || web.Quorum != 1 || web.QuorumFallback != QuorumHealthy {
		t.Errorf("service defaults: %+v", web)
	}
	rs := web.RealServers[0]
	if rs.Port != 80 || rs.Weight != 1 || rs.HealthCheck.Type != CheckTCP || !rs.HealthCheck.InitialHealthy {
		t.Errorf("real server defaults: %+v", rs)
	}
	if u.HealthCheck.Type != CheckNone || u.Family() != 6 || u.RealServers[0].Address != netip.MustParseAddr("2001:db8:1::5") {
		t.Errorf("udp/IPv6 service: %+v", u)
	}
}

// announce = "arp" takes both families: ARP answers for IPv4 VIPs, NDP
// for IPv6 ones.
func TestAnnounceARPTakesBothFamilies(t *testing.T) {
	for _, vip := range []string{"198.18.0.10", "2001:2::10"} {
		t.Run(vip, func(t *testing.T) {
			path := writeConfig(t, map[string]string{"lbd.toml": "[[service]]\nname = \"web\"\nvips = [\"" + vip + "\"]\nport = 443\n" +
				"announce = \"arp\"\nannounce_interface = \"eth0\"\n"})
			cfg, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if s := cfg.Services[0]; s.Announce != AnnounceARP || s.AnnounceInterface != "eth0" || s.VIPs[0] != netip.MustParseAddr(vip) {
				t.Errorf("service: announce %q on %q for %v", s.Announce, s.AnnounceInterface, s.VIPs)
			}
		})
	}
}

func TestConsulEnabledByService(t *testing.T) {
	path := writeConfig(t, map[string]string{"lbd.toml": "", "conf.d/web.toml": svc + "[service.consul]\nservice = \"web\"\ntags = [\"prod\"]\n"})
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Services[0].Consul
	if !cfg.Consul.Enabled || c == nil || c.Service != "web" || c.WeightMeta != "lbd-weight" || !c.PassingOnly {
		t.Errorf("consul: %+v %+v", cfg.Consul, c)
	}
}

func TestConsulRegisterAndVirtualServices(t *testing.T) {
	path := writeConfig(t, map[string]string{"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = [\"198.51.100.0/24\", \"2001:db8:100::/64\"]\nreal_server_networks = [\"10.0.0.0/8\"]\n" +
		svc + "[service.consul_register]\ntags = [\"vip\"]\n[service.consul]\nservice = \"web\"\n[service.health_check]\ntype = \"tcp\"\n"})
	cfg, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	vs := cfg.Consul.VirtualServices
	if !cfg.Consul.Enabled || vs.Tag != "lbd" || len(vs.VIPPools) != 2 {
		t.Errorf("virtual services: %+v", vs)
	}
	s := cfg.Services[0]
	if s.Register == nil || s.Register.Name != "web" || len(s.Register.Tags) != 1 || s.Register.Tags[0] != "vip" {
		t.Errorf("register: %+v", s.Register)
	}
	if !s.Consul.OwnChecks {
		t.Errorf("a service with a health_check table runs its own checks on Consul instances")
	}
}

func TestMissingMainFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "lbd.toml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v; want a not-exist error", err)
	}
}

func TestServiceSame(t *testing.T) {
	const check = "health_check = { type = \"http\", path = \"/healthz\" }\n"
	const rsCheck = "real_server = [{ address = \"10.0.0.1\", health_check = { port = 9000 } }]\n"
	const rs = "real_server = [{ address = \"10.0.0.1\" }]\n"
	tests := []struct {
		name string
		a, b string
		same bool
	}{
		{"moved in its file", svc + rs, "\n\n# moved down\n" + svc + rs, true},
		{"moved, with a health check", svc + check + rs, "\n\n" + svc + check + rs, true},
		{"moved, with a real server's own check", svc + check + rsCheck, "\n# x\n" + svc + check + rsCheck, true},
		{"a real server's weight", svc + rs, svc + "real_server = [{ address = \"10.0.0.1\", weight = 2 }]\n", false},
		{"the check's path", svc + check + rs, svc + strings.Replace(check, "healthz", "ready", 1) + rs, false},
		{"a real server's check port", svc + check + rsCheck, svc + check + strings.Replace(rsCheck, "9000", "9001", 1), false},
	}
	load := func(text string) *Service {
		cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": text}))
		if err != nil {
			t.Fatal(err)
		}
		return &cfg.Services[0]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := load(tt.a).Same(load(tt.b)); got != tt.same {
				t.Errorf("Same = %v, want %v", got, tt.same)
			}
		})
	}
}

func TestRealServersShareCheck(t *testing.T) {
	const file = svc + `health_check = { type = "http", path = "/healthz" }
real_server = [
  { address = "10.0.0.1" },
  { address = "10.0.0.2" },
  { address = "10.0.0.3", health_check = { port = 8081 } },
]
`
	path := writeConfig(t, map[string]string{"lbd.toml": file})
	load := func() *Service {
		cfg, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return &cfg.Services[0]
	}
	s := load()
	rs := s.RealServers
	if rs[0].HealthCheck == nil || rs[0].HealthCheck != rs[1].HealthCheck {
		t.Errorf("real servers without overrides do not share one check: %p, %p", rs[0].HealthCheck, rs[1].HealthCheck)
	}
	if rs[0].HealthCheck != s.HealthCheck {
		t.Errorf("shared check %+v is not the service's %+v", *rs[0].HealthCheck, *s.HealthCheck)
	}
	if rs[2].HealthCheck == rs[0].HealthCheck || rs[2].HealthCheck.Port != 8081 || rs[2].HealthCheck.Path != "/healthz" {
		t.Errorf("overridden check: %+v", rs[2].HealthCheck)
	}
	if o := load(); !s.Same(o) || o.RealServers[0].HealthCheck == rs[0].HealthCheck {
		t.Errorf("two loads of one file are not Same")
	}
	o := load()
	c := *o.RealServers[2].HealthCheck
	c.Port = 8082
	o.RealServers[2].HealthCheck = &c
	if s.Same(o) {
		t.Errorf("a changed check went unnoticed")
	}
}
