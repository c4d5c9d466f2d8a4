package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestErrorsEchoLittle checks that values, keys and names from outside lbd
// are echoed cut in errors: a 5 MB value gives a short line.
func TestErrorsEchoLittle(t *testing.T) {
	huge := strings.Repeat("é", 2_500_000) // 5,000,000 bytes
	tests := []struct {
		name, text, want string
	}{
		{"service name", "[[service]]\nname = \"" + huge + "\"\nvips = [\"192.0.2.1\"]\nport = 80\n", `service[0].name: "` + strings.Repeat("é", 40) + `"…(5000000 bytes) is not a valid service name`},
		{"unknown key", svc + "\"" + huge[:1_000_000] + "\" = 1\n", `service[0].` + strings.Repeat("é", 34) + `…(1000011 bytes): unknown key; accepted in [service]: name, protocol, vips, port, node_port, scheduler, scheduler_flags, session_affinity,`},
		{"scheduler", svc + "scheduler = \"" + huge + "\"\n", `service[0].scheduler: "` + strings.Repeat("é", 40) + `"…(5000000 bytes) is not accepted; expected one of`},
		{"status code", svc + "health_check = { type = \"http\", expect_status = [\"" + huge + "\"] }\n", strings.Repeat("é", 40) + `…(5000000 bytes) is not a status code or range`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(tt.text)})
			if err == nil {
				t.Fatal("accepted")
			}
			if s := err.Error(); len(s) > 600 || !strings.Contains(s, tt.want) {
				t.Errorf("error of %d bytes: %.600s\nwant it short and containing %s", len(s), s, tt.want)
			}
		})
	}
	_, err := ServiceFromConsul(&Config{}, huge, map[string]string{"lbd-vip": huge, "lbd-port": "80", "lbd-" + huge: "x"})
	if s := fmt.Sprint(err); len(s) > 1500 || !strings.Contains(s, "…(5000000 bytes)") {
		t.Errorf("Consul error of %d bytes: %.1500s", len(s), s)
	}
}

// TestSuggestSkipsLongWords checks that a long unknown word (outside data)
// costs no edit distances: they grew with its length times each accepted
// word's.
func TestSuggestSkipsLongWords(t *testing.T) {
	long := strings.Repeat("X", 1<<20) // lower-casing it allocated 1 MiB per word
	if allocs := testing.AllocsPerRun(3, func() { suggest(long, schedulers) }); allocs != 0 {
		t.Errorf("%.0f allocations; want none", allocs)
	}
	if got := suggest("schedular", []string{"scheduler", "protocol"}); got != "scheduler" {
		t.Errorf("suggest = %q", got)
	}
}

// TestNoProblemHidesAnother checks that problems are reported together:
// decode problems do not hide the checks across services (issue #14: an
// unknown key hid a duplicate VIP:port claim), and problems in one place
// do not add false ones elsewhere.
func TestNoProblemHidesAnother(t *testing.T) {
	tests := []invalidConfig{
		{"unknown key and a duplicate claim in one drop-in", map[string]string{"lbd.toml": svc,
			"conf.d/a.toml": "[[service]]\nname = \"web2\"\nvips = [\"192.0.2.10\"]\nport = 80\nschedular = \"rr\"\n"},
			[][2]string{{"conf.d/a.toml:3:9", `192.0.2.10:80/tcp is claimed by service "web2" here and by service "web" at `},
				{"conf.d/a.toml:5:1", "unknown key"}}},
		{"refused VIP before a claimed one", map[string]string{"lbd.toml": svc,
			"conf.d/a.toml": "[[service]]\nname = \"web2\"\nvips = [\"nope\", \"192.0.2.10\"]\nport = 80\n"},
			[][2]string{{"conf.d/a.toml:3:9", `service[0].vips[0]: "nope" is not an IP address`},
				{"conf.d/a.toml:3:17", `service[0].vips[1]: 192.0.2.10:80/tcp is claimed by service "web2" here`}}},
		{"a syntax error in the main file adds no node port problems", map[string]string{"lbd.toml": "[dataplane\n",
			"conf.d/a.toml": "[[service]]\nname = \"np\"\nnode_port = 30080\nreal_server = [{address = \"10.0.0.1\", port = 80}]\n"},
			[][2]string{{"lbd.toml:2:", "TOML syntax error"}}},
		{"a bad node_port_range adds no range problems", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"10.0.0.0/8\"]\nnode_port_range = \"x\"\n",
			"conf.d/a.toml": "[[service]]\nname = \"np\"\nnode_port = 80\nreal_server = [{address = \"10.0.0.1\", port = 80}]\n"},
			[][2]string{{"lbd.toml:3:1", "is not a port range"}}},
		{"every missing key of consul.virtual_services", map[string]string{"lbd.toml": "[consul.virtual_services]\n"},
			[][2]string{{"lbd.toml:1:", "names no tag"}, {"lbd.toml:1:", "has no vip_pools"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { expectErrors(t, errorLines(t, tt.files), tt.want) })
	}
}

// TestErrorsAreCapped checks that a load lists at most maxErrors problems
// and counts the rest.
func TestErrorsAreCapped(t *testing.T) {
	var b strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	_, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(b.String())})
	list, _ := err.(ErrorList)
	if len(list) != maxErrors+1 {
		t.Fatalf("%d problems listed; want %d and a count", len(list), maxErrors+1)
	}
	if last := list[maxErrors].Error(); last != "lbd.toml: 4000 more problems not listed: lbd lists the first 1000; expected a configuration with fewer problems (fix these and check again)" {
		t.Errorf("last: %s", last)
	}
}

// TestCheckTimings checks that an unwritten timing follows the written
// one, and that a timeout may be as long as the interval.
func TestCheckTimings(t *testing.T) {
	tests := []struct {
		name              string
		check, rs         string // the service's check, a real server's override
		interval, timeout time.Duration
		err               string
	}{
		{"defaults", "", "", 2 * time.Second, time.Second, ""},
		{"interval alone (issue #14)", `interval = "1s"`, "", time.Second, time.Second, ""},
		{"short interval alone", `interval = "500ms"`, "", 500 * time.Millisecond, 500 * time.Millisecond, ""},
		{"long interval alone", `interval = "10s"`, "", 10 * time.Second, time.Second, ""},
		{"timeout alone", `timeout = "5s"`, "", 5 * time.Second, 5 * time.Second, ""},
		{"keepalived's delay_loop 1, connect_timeout 1", `interval = "1s", timeout = "1s"`, "", time.Second, time.Second, ""},
		{"override's interval alone", "", `interval = "300ms"`, 300 * time.Millisecond, 300 * time.Millisecond, ""},
		{"override of a written timeout", `interval = "5s", timeout = "3s"`, `interval = "4s"`, 4 * time.Second, 3 * time.Second, ""},
		{"timeout longer than interval", `interval = "1s", timeout = "2s"`, "", 0, 0, "timeout (2s) is longer than interval (1s); expected timeout <= interval"},
		{"override shorter than a written timeout", `interval = "5s", timeout = "3s"`, `interval = "2s"`, 0, 0, "health_check.interval: timeout (3s) is longer than interval (2s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := svc + "health_check = { type = \"tcp\", " + strings.TrimSuffix(tt.check, ", ") + " }\n" +
				"real_server = [{ address = \"10.0.0.1\", health_check = { " + tt.rs + " } }]\n"
			cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v; want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			hc := cfg.Services[0].RealServers[0].HealthCheck
			if hc.Interval != tt.interval || hc.Timeout != tt.timeout {
				t.Errorf("interval %s, timeout %s; want %s, %s", hc.Interval, hc.Timeout, tt.interval, tt.timeout)
			}
		})
	}
}

func TestForbiddenRealServer(t *testing.T) {
	tests := []struct {
		addr, reason string
	}{
		{"127.0.0.1", "loopback"}, {"::1", "loopback"}, {"::ffff:127.0.0.1", "loopback"},
		{"169.254.1.1", "link-local"}, {"fe80::1", "link-local"}, {"::ffff:169.254.1.1", "link-local"},
		{"224.0.0.1", "multicast"}, {"ff02::1", "multicast"},
		{"255.255.255.255", "broadcast"}, {"::ffff:255.255.255.255", "broadcast"},
		{"0.0.0.0", "unspecified"}, {"::", "unspecified"}, {"0.1.2.3", `"this network" (0.0.0.0/8)`},
		{"10.0.0.1", ""}, {"2001:db8::1", ""}, {"::ffff:10.0.0.1", ""}, {"192.0.2.255", ""},
	}
	for _, tt := range tests {
		reason, bad := ForbiddenRealServer(netip.MustParseAddr(tt.addr))
		if reason != tt.reason || bad != (tt.reason != "") {
			t.Errorf("ForbiddenRealServer(%s) = %q, %v; want %q", tt.addr, reason, bad, tt.reason)
		}
	}
}
