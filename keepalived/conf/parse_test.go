package conf

import (
	"slices"
	"strings"
	"testing"
)

// The same virtual server, written every way keepalived accepts, gives one
// tree.
func TestParseLayoutsGiveOneTree(t *testing.T) {
	const want = "virtual_server 192.0.2.1 80 { lb_algo rr; real_server 10.0.0.1 80 { weight 1; TCP_CHECK { connect_timeout 3 } } }"
	for name, text := range map[string]string{
		"many lines":      "virtual_server 192.0.2.1 80 {\n  lb_algo rr\n  real_server 10.0.0.1 80 {\n    weight 1\n    TCP_CHECK {\n      connect_timeout 3\n    }\n  }\n}\n",
		"one-line blocks": "virtual_server 192.0.2.1 80 { lb_algo rr\nreal_server 10.0.0.1 80 { weight 1\nTCP_CHECK { connect_timeout 3 } } }",
		"tabs and CRLF": "virtual_server\t192.0.2.1\t80\t{\r\n\tlb_algo\trr\r\n\treal_server 10.0.0.1 80 {\r\n\t\tweight 1\r\n\t\tTCP_CHECK {\r\n" +
			"\t\t\tconnect_timeout 3\r\n\t\t}\r\n\t}\r\n}\r\n",
		"braces on their own lines": "virtual_server 192.0.2.1 80\n{\nlb_algo rr\nreal_server 10.0.0.1 80\n{\nweight 1\nTCP_CHECK\n{\nconnect_timeout 3\n}\n}\n}",
		"braces attached":           "virtual_server 192.0.2.1 80{\nlb_algo rr\nreal_server 10.0.0.1 80{weight 1\nTCP_CHECK{connect_timeout 3}}}",
		"comments everywhere": "# header ✓ ünïcödé\n! bang comment\nvirtual_server 192.0.2.1 80 { # opening\n  lb_algo rr ! scheduler\n" +
			"  real_server 10.0.0.1 80 { weight 1 # inline\n TCP_CHECK { connect_timeout 3 } } ! closing\n}\n",
		"quoted words": `virtual_server "192.0.2.1" "80" { "lb_algo" rr
real_server 10.0.0.1 80 { weight 1
TCP_CHECK { connect_timeout "3" } } }`,
	} {
		cfg, err := parseText(t, text)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := render(cfg.Root.Children); got != want {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}

func TestParseOneLineBlock(t *testing.T) {
	one, err1 := parseText(t, "real_server 1.2.3.4 80 { weight 1 }")
	many, err2 := parseText(t, "real_server 1.2.3.4 80\n{\n\tweight 1\n}\n")
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if a, b := render(one.Root.Children), render(many.Root.Children); a != b || a != "real_server 1.2.3.4 80 { weight 1 }" {
		t.Errorf("one line %s, many lines %s", a, b)
	}
}

// Each node knows its line; lines split at braces keep their file line,
// including the last line without a newline.
func TestParsePositions(t *testing.T) {
	cfg, err := parseText(t, "global_defs {\n  router_id r1\n}\n\n# comment\nvirtual_server 192.0.2.1 80 { delay_loop 6\n  real_server 10.0.0.1 80 { weight 1 } }\nvrrp_script s {\r\n script x }")
	if err != nil {
		t.Fatal(err)
	}
	const f = mainConf + ":"
	want := []string{f + "1 global_defs", f + "2 router_id", f + "6 virtual_server", f + "6 delay_loop",
		f + "7 real_server", f + "7 weight", f + "8 vrrp_script", f + "9 script"}
	if got := positions(&cfg.Root); !slices.Equal(got, want) {
		t.Errorf("positions:\n got %q\nwant %q", got, want)
	}
	if n := cfg.Root.Child("virtual_server"); n == nil || n.Raw != "virtual_server 192.0.2.1 80" {
		t.Errorf("Raw of virtual_server = %+v", n)
	}
}

// Malformed input gives errors at the line they are on, and the parser
// reads on as far as it can.
func TestParseMalformedInput(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string // line kind severity
	}{
		{"extra close", "a {\n}\n}\nb x", []string{"3 brace error"}},
		{"missing close", "a {\n b {\n c 1\n}\n", []string{"1 brace error"}},
		{"stray open", "{\n x 1\n}\n", []string{"1 brace error"}},
		{"open quote", "a {\n notify \"/bin/x\n}", []string{"2 quote error"}},
		{"open quote, braces hidden", "a {\n b \"{ c }\n}\n}", []string{"2 quote error", "4 brace error"}},
		{"long line", "a " + strings.Repeat("x", 1100) + "\nb 1", []string{"1 long-line warning"}},
		{"NUL", "a 1\x00 2\nb 1", []string{"1 nul warning"}},
		{"escaped comment", `notify x\#1`, []string{"1 escaped-comment warning"}},
		{"escaped comment first", "\\# a\nb 1", []string{"1 copy-marker error"}},
	} {
		cfg, err := parseText(t, tc.text)
		if got := problemList(cfg, err); !slices.Equal(got, tc.want) {
			t.Errorf("%s: problems %q, want %q (%v)", tc.name, got, tc.want, err)
		}
	}
}

// What keepalived does with the malformed lines above.
func TestParseMalformedTrees(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"open quote keeps the words before it", "a {\n notify x \"/bin/x\n}", `a { notify x }`},
		{"long line goes on as a line of its own", "a " + strings.Repeat("x", 1021) + "yz\nb 1",
			"a " + strings.Repeat("x", 1021) + "; yz; b 1"},
		{"NUL ends the line", "a 1\x00 2\nb 1", "a 1; b 1"},
		{"escaped comment is a comment to the VRRP and checker processes", `notify x\#1`, "notify x"},
		{"stray '{' and its '}' make nothing", "{\n x 1\n}\ny 2", "x 1; y 2"},
		{"quoted brace is a word", "a \"{\"\n\"}\"", `a "{"; "}"`},
	} {
		cfg, _ := parseText(t, tc.text)
		if got := render(cfg.Root.Children); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestConditionalLines(t *testing.T) {
	const text = `global_defs {
@main   router_id main_router
@backup router_id backup_router
}
vrrp_instance VI {
	unicast_peer {
		@^main    1.2.3.4
		@^backup  1.2.3.5
		@^backup2 1.2.3.6
	}
	@main
	@backup2 priority 50
}
@main @backup nested 1`
	for _, tc := range []struct{ id, want string }{
		{"main", "global_defs { router_id main_router }; vrrp_instance VI { unicast_peer { 1.2.3.5; 1.2.3.6 } }; @backup nested 1"},
		{"backup", "global_defs { router_id backup_router }; vrrp_instance VI { unicast_peer { 1.2.3.4; 1.2.3.6 } }"},
		{"other", "global_defs; vrrp_instance VI { unicast_peer { 1.2.3.4; 1.2.3.5; 1.2.3.6 } }"},
	} {
		cfg, err := parseFiles(t, map[string]string{"etc/keepalived/keepalived.conf": text}, Options{ConfigID: tc.id})
		if err != nil {
			t.Fatal(err)
		}
		got := render(cfg.Root.Children)
		want := strings.Replace(tc.want, "global_defs;", "global_defs { };", 1)
		if got != want {
			t.Errorf("config id %s:\n got %s\nwant %s", tc.id, got, want)
		}
	}
}

func TestDefaultConfigID(t *testing.T) {
	id, err := DefaultConfigID()
	if err != nil {
		t.Fatal(err)
	}
	if id == "" || strings.Contains(id, ".") {
		t.Errorf("DefaultConfigID() = %q: want the host name's first label", id)
	}
}

func TestNodeHelpers(t *testing.T) {
	cfg, err := parseText(t, "virtual_server 192.0.2.1 80 {\n lvs_sched wrr\n real_server 10.0.0.1 80 { weight 2 }\n real_server 10.0.0.2 80 { weight 3 }\n}")
	if err != nil {
		t.Fatal(err)
	}
	vs := cfg.Root.Child("virtual_server")
	if vs == nil || !vs.Block {
		t.Fatalf("no virtual_server block: %s", render(cfg.Root.Children))
	}
	if s := vs.Child("lb_algo", "lvs_sched"); s == nil || s.Args[0] != "wrr" {
		t.Errorf("Child(lb_algo, lvs_sched) = %+v", s)
	}
	if vs.Child("nope") != nil {
		t.Error("Child(nope) found something")
	}
	rs := vs.ChildrenOf("real_server")
	if len(rs) != 2 || rs[1].Child("weight").Args[0] != "3" {
		t.Errorf("ChildrenOf(real_server) = %d nodes", len(rs))
	}
	if a, ok := vs.Arg(1); !ok || a != "80" {
		t.Errorf("Arg(1) = %q, %v", a, ok)
	}
	if _, ok := vs.Arg(2); ok {
		t.Error("Arg(2) of two arguments exists")
	}
	var seen []string
	cfg.Root.Walk(func(n *Node) bool {
		seen = append(seen, n.Keyword)
		return n.Keyword != "real_server"
	})
	if want := []string{"virtual_server", "lvs_sched", "real_server", "real_server"}; !slices.Equal(seen, want) {
		t.Errorf("Walk saw %q, want %q", seen, want)
	}
}
