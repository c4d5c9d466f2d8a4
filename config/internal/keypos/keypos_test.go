package keypos

import (
	"regexp"
	"testing"

	"github.com/BurntSushi/toml"
)

func TestScan(t *testing.T) {
	src := `# lbd
[sync]
min_sync_period = "1s"   # comment
  burst=3

[[service]]
name = "web"
vips = [
  "192.0.2.1", # first
  "192.0.2.2",
]
a.b."c.d" = 1
desc = """
[[not a header]]
x = 1
"""
lit = '''also
not = a key'''

[service.health_check]
type = "http"

[[service.real_server]]
address = "10.0.0.1"
[[service.real_server]]
address = "10.0.0.2"
  [service.real_server.health_check]
  port = 8080

[[service]]
name = "dns"
real_servers = [ { address = "10.0.0.3", port = 53 },
                 { address = "10.0.0.4" } ]
'quoted key' = "v"
"esc\"aped" = 'x'
t = 1979-05-27 07:32:00Z
nested = [[1, 2], [3]]
`
	want := map[string]Pos{
		"sync":                                        {2, 1},
		"sync.min_sync_period":                        {3, 1},
		"sync.burst":                                  {4, 3},
		"service":                                     {6, 1},
		"service[0]":                                  {6, 1},
		"service[0].name":                             {7, 1},
		"service[0].vips":                             {8, 1},
		"service[0].vips[0]":                          {9, 3},
		"service[0].vips[1]":                          {10, 3},
		"service[0].a.b.c.d":                          {12, 1},
		"service[0].desc":                             {13, 1},
		"service[0].lit":                              {17, 1},
		"service[0].health_check":                     {20, 1},
		"service[0].health_check.type":                {21, 1},
		"service[0].real_server[0]":                   {23, 1},
		"service[0].real_server[0].address":           {24, 1},
		"service[0].real_server[1]":                   {25, 1},
		"service[0].real_server[1].address":           {26, 1},
		"service[0].real_server[1].health_check":      {27, 3},
		"service[0].real_server[1].health_check.port": {28, 3},
		"service[1]":                                  {30, 1},
		"service[1].name":                             {31, 1},
		"service[1].real_servers[0]":                  {32, 18},
		"service[1].real_servers[0].address":          {32, 20},
		"service[1].real_servers[0].port":             {32, 42},
		"service[1].real_servers[1].address":          {33, 20},
		"service[1].quoted key":                       {34, 1},
		`service[1].esc\"aped`:                        {35, 1},
		"service[1].t":                                {36, 1},
		"service[1].nested[1]":                        {37, 19},
		"service[1].nested[1][0]":                     {37, 20},
		"service[1].real_servers":                     {32, 1},
		"service[0].real_server":                      {23, 1},
		"service[1].nested":                           {37, 1},
		"service[1].nested[0]":                        {37, 11},
		"service[1].nested[0][1]":                     {37, 15},
	}
	if _, err := toml.Decode(src, new(map[string]any)); err != nil {
		t.Fatalf("test document is not valid TOML: %v", err)
	}
	got := Scan(src)
	for path, w := range want {
		if g, ok := got[path]; !ok {
			t.Errorf("%s: not found", path)
		} else if g != w {
			t.Errorf("%s: got %d:%d, want %d:%d", path, g.Line, g.Col, w.Line, w.Col)
		}
	}
	for path := range got {
		if regexp.MustCompile(`not|x$`).MatchString(path) {
			t.Errorf("%s: found a key inside a string", path)
		}
	}
}

var index = regexp.MustCompile(`\[\d+\]`)

// FuzzScan checks that Scan never panics or hangs, and that on every
// document BurntSushi/toml accepts it finds every key that decoder saw.
func FuzzScan(f *testing.F) {
	for _, s := range []string{
		"a = 1\n[b]\nc = [1, {d = 2}]\n[[e]]\nf = '''x'''\n",
		"[[s]]\nname = \"x\"\n[[s.r]]\na = 1\n[s.h]\nt = \"y\"\n",
		"a.\"b\".c = \"\"\"\nq\"\"\"\"\"\n",
		"x = [ # c\n 1,\n ]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got := Scan(src)
		md, err := toml.Decode(src, new(map[string]any))
		if err != nil {
			return
		}
		found := make(map[string]bool, len(got))
		for path := range got {
			found[index.ReplaceAllString(path, "")] = true
		}
		for _, k := range md.Keys() {
			if !plain(k) {
				continue // quoted keys with dots or escapes are not lbd's
			}
			if !found[k.String()] {
				t.Errorf("key %q not found; scanned %v", k.String(), got)
			}
		}
	})
}

func plain(k toml.Key) bool {
	for _, part := range k {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !isBare(part[i]) {
				return false
			}
		}
	}
	return true
}
