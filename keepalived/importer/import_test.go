package importer

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/keepalived/conf"
)

// importText parses text as keepalived.conf and imports it; every output
// must pass lbd's validation and import the same twice.
func importText(t *testing.T, text string) Result {
	t.Helper()
	parse := func() Result {
		fs := conf.MapFS(fstest.MapFS{"keepalived.conf": {Data: []byte(text), Mode: 0o644}})
		cfg, err := conf.Parse("/keepalived.conf", conf.Options{ConfigID: "test", FS: fs})
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		res, err := Import(cfg, Options{Executable: func(p string) bool { return p == "/usr/local/bin/ok" }})
		if err != nil {
			t.Fatalf("import: %v", err)
		}
		return res
	}
	res := parse()
	if _, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(res.TOML())}); err != nil {
		t.Fatalf("output does not validate: %v\n%s", err, res.TOML())
	}
	if again := parse(); again.TOML() != res.TOML() {
		t.Fatalf("two imports differ")
	}
	return res
}

func hasItem(r Report, line int, k Kind, why string) bool {
	for _, it := range r.Items {
		if it.Pos.Line == line && it.Kind == k && strings.Contains(it.Why, why) {
			return true
		}
	}
	return false
}

type want struct {
	line int
	kind Kind
	why  string
}

func TestImport(t *testing.T) {
	tests := []importCase{
		{"nat, defaults, tcp check",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  TCP_CHECK {\n  }\n }\n}\n",
			[]string{"# /keepalived.conf:1: virtual_server 192.0.2.1 80\n[[service]]", `name = "vs-192.0.2.1-80-tcp"`, `scheduler = "wlc"`, `forward = "nat"`,
				`on_unhealthy = "remove"`, `type = "tcp"`, `interval = "1m0s"`, `timeout = "5s"`, "rise = 1", "fall = 2", `initial_state = "healthy"`},
			nil, nil, true},
		{"retry gives fall, inhibit gives drain, alpha",
			"virtual_server 192.0.2.1 80 {\n delay_loop 3\n alpha\n real_server 10.0.0.1 80 {\n  inhibit_on_failure\n  TCP_CHECK {\n   connect_timeout 2\n   retry 4\n  }\n }\n}\n",
			[]string{`interval = "3s"`, `timeout = "2s"`, "fall = 5", `on_unhealthy = "drain"`, `initial_state = "unhealthy"`}, nil, nil, true},
		{"no checker: type none",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{"[service.health_check]\ntype = \"none\""}, nil, nil, true},
		{"ipv6 and udp",
			"virtual_server 2001:db8::1 53 {\n protocol UDP\n lb_algo rr\n real_server 2001:db8::10 53 {\n }\n}\n",
			[]string{`name = "vs-2001-db8--1-53-udp"`, `protocol = "udp"`, `scheduler = "rr"`}, nil, nil, true},
		{"scheduler lbd lacks",
			"virtual_server 192.0.2.1 80 {\n lb_algo lblc\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{`scheduler = "wlc"`}, nil, []want{{2, NotMapped, "no scheduler"}}, false},
		{"sh flags",
			"virtual_server 192.0.2.1 80 {\n lb_algo sh\n flag-1\n sh-port\n ops\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{`scheduler_flags = ["sh-fallback", "sh-port"]`}, nil, []want{{5, NotMapped, "one-packet"}}, false},
		{"persistence and granularity",
			"virtual_server 192.0.2.1 80 {\n persistence_timeout\n persistence_granularity 255.255.255.0\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{"session_affinity = true", `session_affinity_timeout = "6m0s"`}, nil, []want{{3, NotMapped, "netmask"}}, false},
		{"tunnel, gue, per-real-server method",
			"virtual_server 192.0.2.1 80 {\n lvs_method TUN type gue port 6080 remcsum\n real_server 10.0.0.1 80 {\n  lvs_method DR\n }\n real_server 10.0.0.2 80 {\n }\n}\n",
			[]string{`forward = "tun"`, `tunnel_type = "gue"`, "tunnel_port = 6080", `tunnel_checksum = "remote"`, "address = \"10.0.0.1\"\nforward = \"dr\""}, nil, nil, true},
		{"nat with a dr real server",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  lvs_method DR\n }\n}\n",
			nil, []string{`forward = "dr"`}, []want{{2, NotMapped, "does not mix"}}, false},
		{"dr port differs: check keeps it",
			"virtual_server 192.0.2.1 80 {\n lb_kind DR\n real_server 10.0.0.1 8080 {\n  TCP_CHECK {\n  }\n }\n}\n",
			[]string{"port = 8080"}, []string{"address = \"10.0.0.1\"\nport"}, []want{{3, Differs, "cannot map ports"}}, true},
		{"http get: first url, digest differs",
			"virtual_server 192.0.2.1 80 {\n virtualhost www.example\n real_server 10.0.0.1 80 {\n  HTTP_GET {\n   url {\n    path /health\n    digest 0123\n    status_code 200 301-302\n   }\n   url {\n    path /b\n   }\n   nb_get_retry 2\n  }\n }\n}\n",
			[]string{`type = "http"`, `path = "/health"`, `host = "www.example"`, `expect_status = [200, "301-302"]`, "fall = 3"}, nil,
			[]want{{7, Differs, "digest"}, {10, NotMapped, "one path"}}, false},
		{"ssl get: no verification",
			"virtual_server 192.0.2.1 443 {\n real_server 10.0.0.1 443 {\n  SSL_GET {\n   url {\n    path /\n   }\n  }\n }\n}\n",
			[]string{`type = "https"`, "tls_verify = false", `expect_status = ["200-299"]`}, nil, nil, true},
		{"misc check, program present",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  MISC_CHECK {\n   misc_path \"/usr/local/bin/ok 'a b' c\"\n   misc_timeout 4\n   user checker\n  }\n }\n}\n",
			[]string{`command = ["/usr/local/bin/ok", "a b", "c"]`, `user = "checker"`, `timeout = "4s"`}, nil, nil, true},
		{"misc check, program absent",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  MISC_CHECK {\n   misc_path /opt/missing\n  }\n }\n}\n",
			[]string{`type = "none"`}, []string{"exec"}, []want{{3, NotMapped, "not an executable file"}}, false},
		{"dns check defaults",
			"virtual_server 192.0.2.1 53 {\n protocol UDP\n real_server 10.0.0.1 53 {\n  DNS_CHECK {\n  }\n }\n}\n",
			[]string{`type = "dns"`, `query_name = "."`, `query_type = "SOA"`, "fall = 4"}, nil, nil, true},
		{"udp check",
			"virtual_server 192.0.2.1 99 {\n protocol UDP\n real_server 10.0.0.1 99 {\n  UDP_CHECK {\n   payload 70696e67\n   require_reply 706f6e67\n  }\n }\n}\n",
			[]string{`type = "udp"`, `payload = "ping"`, `expect = "pong"`}, nil, nil, true},
		{"unmappable checkers",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  PING_CHECK {\n  }\n  TCP_CHECK {\n  }\n  HTTP_GET {\n  }\n }\n}\n",
			[]string{`type = "tcp"`}, nil, []want{{3, NotMapped, "ICMP"}, {7, NotMapped, "one check"}}, false},
		{"quorum of equal weights",
			"virtual_server 192.0.2.1 80 {\n quorum 4\n real_server 10.0.0.1 80 {\n  weight 2\n }\n real_server 10.0.0.2 80 {\n  weight 2\n }\n real_server 10.0.0.3 80 {\n  weight 2\n }\n}\n",
			[]string{"quorum = 2"}, nil, nil, true},
		{"quorum of unequal weights, hysteresis, sorry server",
			"virtual_server 192.0.2.1 80 {\n quorum 4\n hysteresis 1\n sorry_server 10.0.9.9 8080\n real_server 10.0.0.1 80 {\n  weight 3\n }\n real_server 10.0.0.2 80 {\n  weight 1\n }\n}\n",
			[]string{"quorum = 2", `quorum_fallback = "sorry"`, `sorry_server = "10.0.9.9:8080"`}, nil,
			[]want{{2, Differs, "sum of weights"}, {3, Differs, "hysteresis"}}, true},
		{"group: ranges, families, marks",
			"virtual_server_group G {\n 192.0.2.3-5 80\n 2001:db8::9-a 80\n fwmark 7\n}\nvirtual_server group G {\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{`vips = ["192.0.2.3", "192.0.2.4", "192.0.2.5"]`, `name = "group-G-fwmark-7-tcp"`, "fwmark = 7"}, nil,
			[]want{{7, NotMapped, "IPv4 real server in an IPv6 service"}}, false},
		{"real servers' checks differ",
			"virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  TCP_CHECK {\n   connect_port 81\n  }\n }\n real_server 10.0.0.2 80 {\n  TCP_CHECK {\n  }\n }\n" +
				" real_server 10.0.0.3 80 {\n }\n real_server 10.0.0.4 80 {\n  HTTP_GET {\n   url {\n    path /x\n   }\n  }\n }\n}\n",
			[]string{"port = 81", "address = \"10.0.0.2\"\n[service.real_server.health_check]\nport = 80",
				"address = \"10.0.0.3\"\n[service.real_server.health_check]\ntype = \"none\"", "address = \"10.0.0.4\"\n[service.real_server.health_check]\ntype = \"http\""},
			nil, nil, true},
		{"duplicate real server, sorry server of another family",
			"virtual_server 192.0.2.1 80 {\n sorry_server 2001:db8::1 80\n real_server 10.0.0.1 80 {\n }\n real_server 10.0.0.1 80 {\n }\n}\n",
			[]string{"address = \"10.0.0.1\""}, []string{"sorry"}, []want{{2, NotMapped, "IPv6 sorry server"}, {5, NotMapped, "same real server as at /keepalived.conf:3"}}, false},
		{"duplicate VIP:port",
			"virtual_server 192.0.2.1 80 {\n}\nvirtual_server 192.0.2.1 80 {\n}\n",
			nil, []string{"vs-192.0.2.1-80-tcp-2"}, []want{{3, NotMapped, "already the service of another virtual server, such as 192.0.2.1:80/tcp (at /keepalived.conf:1)"}}, false},
		{"globals",
			"global_defs {\n router_id A\n notification_email {\n  a@b\n }\n lvs_timeouts tcp 7200 udp 60\n lvs_sync_daemon eth1 VI_1 id 3\n lvs_flush\n}\n",
			[]string{"[ipvs]\ntcp_timeout = \"2h0m0s\"\nudp_timeout = \"1m0s\"", "# [ha.ipvs_sync]\n# interface = \"eth1\"", "# sync_id = 3"}, nil,
			[]want{{2, Unneeded, "not needed"}, {7, NotMapped, "peer"}, {8, NotMapped, "flushes"}}, false},
		{"vrrp and unknown",
			"vrrp_instance V {\n}\nwhatever 1\nvirtual_server 192.0.2.1 80 {\n oddity\n}\n",
			nil, nil, []want{{1, NotMapped, "has no interface"}, {3, Ignored, "keepalived 2.2.7 logs"}, {5, Ignored, "virtual_server"}}, false},
	}
	runImportCases(t, tests)
}

func TestCountQuorum(t *testing.T) {
	rs := func(ws ...int) []*real {
		out := make([]*real, len(ws))
		for i, w := range ws {
			out[i] = &real{weight: w}
		}
		return out
	}
	tests := []struct {
		q     int
		reals []*real
		n     int
		exact bool
	}{
		{1, rs(1, 1), 1, true},
		{3, rs(1, 1, 1), 3, true},
		{4, rs(2, 2, 2), 2, true},
		{7, rs(2, 2, 2), 3, false},
		{1, rs(3, 1), 1, true},
		{4, rs(3, 1), 2, false},
		{2, nil, 1, false},
	}
	for _, tt := range tests {
		n, exact := countQuorum(tt.q, tt.reals)
		if n != tt.n || exact != tt.exact {
			t.Errorf("countQuorum(%d, %d reals) = %d, %v; want %d, %v", tt.q, len(tt.reals), n, exact, tt.n, tt.exact)
		}
	}
}

// importCase is one configuration to import and what its import must
// give.
type importCase struct {
	name     string
	conf     string
	contains []string // in the TOML
	absent   []string
	items    []want
	complete bool
}

func runImportCases(t *testing.T, tests []importCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := importText(t, tt.conf)
			out := res.TOML()
			for _, s := range tt.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.absent {
				if strings.Contains(out, s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
			for _, w := range tt.items {
				if !hasItem(res.Report, w.line, w.kind, w.why) {
					t.Errorf("no %s item at line %d with %q; report:\n%v", w.kind, w.line, w.why, res.Report.Items)
				}
			}
			if got := res.Report.Complete(); got != tt.complete {
				t.Errorf("complete = %v, want %v; report:\n%v", got, tt.complete, res.Report.Items)
			}
		})
	}
}
