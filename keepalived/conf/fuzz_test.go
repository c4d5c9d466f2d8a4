package conf

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzParse checks that no input crashes the parser, that every error and
// warning names a file and a line of it (but the count of those not
// listed), that every node has a line of a file it read, and that reading
// again gives the same tree and problems. The second input is a file the
// first can include as inc.conf or *.inc.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/include/*/*.conf")
	seeds = append(seeds, "testdata/include/keepalived.conf")
	for _, p := range seeds {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), "")
	}
	for _, s := range [][2]string{
		{"virtual_server 192.0.2.1 80 { lb_algo rr\nreal_server 10.0.0.1 80 { weight 1 } }\r\n", ""},
		{"include inc.conf\nvs {\ninclude *.inc\n}", "real_server 1.2.3.4 80 { weight 1 }\ninclude ../keepalived/inc.conf"},
		{"@main a 1\n@^main b 2\n$X=1\n$Y=${X} $X\nc $Y", ""},
		{"$M=\\\nvs ${i} {\\\n  weight ${i}\\\n}\n~SEQ(i, 1, 3) $M\n~SEQx(h, 0x9, 0xb) ${h}\n~LST({a,b},{1,2},{3}) ${a}${b}", ""},
		{"a \"b # c\" \\# d ! e\n\\# f\n\"open", ""},
		{"x ${_RANDOM 1 10} y ${_PWD} ${_INSTANCE} ${_HASH}\n$A=$B\n$B=$A\n$A", ""},
		{"global_defs {\n include_check +match\n}\nincludea {inc,none}.conf\nincludeb *.none", "x"},
		{"} { {\n{ a", ""},
		{"a " + strings.Repeat("x", 1030) + "\x00b\n", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, main, inc string) {
		m := fstest.MapFS{
			"etc/keepalived/keepalived.conf": {Data: []byte(main), Mode: 0o644},
			"etc/keepalived/inc.conf":        {Data: []byte(inc), Mode: 0o644},
			"etc/keepalived/conf.d/x.inc":    {Data: []byte(inc), Mode: 0o644},
		}
		opts := Options{Limits: Limits{MaxLines: 20_000, MaxBytes: 1 << 20, MaxSubstitutions: 100_000}}
		cfg, err := parseMap(m, opts)
		checkPositions(t, cfg, err)
		again, err2 := parseMap(m, opts)
		if a, b := render(cfg.Root.Children), render(again.Root.Children); a != b {
			t.Fatalf("two reads differ:\n%s\n%s", a, b)
		}
		if a, b := problemList(cfg, err), problemList(again, err2); !slices.Equal(a, b) || !slices.Equal(cfg.Files, again.Files) {
			t.Fatalf("two reads differ: %q, %q; files %q, %q", a, b, cfg.Files, again.Files)
		}
	})
}

func checkPositions(t *testing.T, cfg *Config, err error) {
	t.Helper()
	var list ErrorList
	if err != nil && !errors.As(err, &list) {
		t.Fatalf("error %T is not an ErrorList: %v", err, err)
	}
	for _, p := range append(list, ptrs(cfg.Warnings)...) {
		if p.Pos.File == "" || p.Pos.Line < 1 || p.Msg == "" {
			t.Errorf("problem without a line: %+v", p)
		}
		if len(p.Error()) > 600 {
			t.Errorf("problem of %d bytes: %.200s", len(p.Error()), p.Error())
		}
	}
	files := map[string]bool{}
	for _, f := range cfg.Files {
		files[f] = true
	}
	cfg.Root.Walk(func(n *Node) bool {
		if n.Pos.Line < 1 || !files[n.Pos.File] {
			t.Errorf("node %q at %v, not a line of %q", n.Keyword, n.Pos, cfg.Files)
		}
		return true
	})
}

func ptrs(ps []Problem) []*Problem {
	out := make([]*Problem, len(ps))
	for i := range ps {
		out[i] = &ps[i]
	}
	return out
}
