package config

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// expectErrors fails unless got (error lines as errorLines returns them)
// are exactly the expected ones: "file:line" prefixes and fragments.
func expectErrors(t *testing.T, got []string, want [][2]string) {
	t.Helper()
	used := make([]bool, len(got))
	for _, w := range want {
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
			t.Errorf("unexpected error: %.300s", g)
		}
	}
}

// fill repeats unit between prefix and suffix up to about size bytes.
func fill(prefix, unit, suffix string, size int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len()+len(unit)+len(suffix) <= size {
		b.WriteString(unit)
	}
	b.WriteString(suffix)
	return b.String()
}

// TestLimits checks that every limit refuses what exceeds it before a
// parser runs, at the line where it is exceeded, and that what lbd needs
// stays far below each.
func TestLimits(t *testing.T) {
	const deepCheck = "[[service]]\nname = \"web\"\nvips = [\"192.0.2.10\"]\nport = 80\n" +
		"real_server = [{ address = \"10.0.0.1\", health_check = { type = \"http\", expect_status = [200] } }]\n"
	tests := []invalidConfig{
		// Issue #14: 64 KB of nested inline tables took 10 GB.
		{"nested inline tables", map[string]string{"lbd.toml": strings.Repeat("a={", 64<<10/3)},
			[][2]string{{"lbd.toml:1:50:", "nesting deeper than 32 levels (each part of a [table] header or dotted key, each array and each inline table is one); lbd's configuration needs at most 8"}}},
		// and 200 KB of nested arrays 15 GB.
		{"nested arrays", map[string]string{"lbd.toml": "[dataplane]\nlocal_networks = " + strings.Repeat("[", 200<<10)},
			[][2]string{{"lbd.toml:2:48:", "nesting deeper than 32 levels"}}},
		{"dotted header", map[string]string{"lbd.toml": "[" + strings.Repeat("a.", 40) + "a]\n"},
			[][2]string{{"lbd.toml:1:", "nesting deeper than 32 levels"}}},
		{"in a drop-in, beside other problems", map[string]string{"lbd.toml": "[sync]\nburst = 0\n",
			"conf.d/a.toml": svc + "\n\nx = " + strings.Repeat("[", 100)},
			[][2]string{{"lbd.toml:2:1", "sync.burst: 0 is out of range"}, {"conf.d/a.toml:8:", "nesting deeper than 32 levels"}}},
		{"too many values", map[string]string{"lbd.toml": fill("[dataplane]\nlocal_networks = [", "1,", "]\n", 4_100_000)},
			[][2]string{{"lbd.toml:2:", "more than 2000000 keys and array elements in one file"}}},
		{"long key paths", map[string]string{"lbd.toml": "[" + strings.Repeat("x", 1<<20) + "]\n" + fill("", "a=1\n", "", 300<<10)},
			[][2]string{{"lbd.toml:64:2:", "the paths of the keys and array elements are more than 64 MiB long in all"}}},
		{"generic TOML over 2 MiB", map[string]string{"lbd.toml": svc + "\"name2\" = 1\n" + fill("", "# padding\n", "", 2<<20)},
			[][2]string{{"lbd.toml:6:1:", "TOML syntax error, or TOML beyond the plain subset lbd reads in files of any size (quoted or dotted keys, escape sequences, multi-line strings, dates, exponents, a table defined twice), which lbd reads only in files of at most 2 MiB and this one is"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { expectErrors(t, errorLines(t, tt.files), tt.want) })
	}
	// What lbd needs passes: its deepest nesting, and brackets in strings
	// and comments, which do not count.
	accepted := map[string]string{
		"deepest":             deepCheck,
		"brackets in strings": deepCheck + "[service.health_check]\ntype = \"http\"\nexpect_body = \"" + strings.Repeat("[{", 100) + "\" # " + strings.Repeat("[", 100) + "\n",
		"generic under 2 MiB": deepCheck + "[service.health_check]\ntype = \"http\"\nexpect_body = \"\\u0041\"\n" + fill("", "# padding\n", "", 1<<20),
	}
	for name, text := range accepted {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(writeConfig(t, map[string]string{"lbd.toml": text})); err != nil {
				t.Errorf("refused: %.500v", err)
			}
		})
	}
}

// TestParseSizeLimits checks the size limits on contents given to Parse.
func TestParseSizeLimits(t *testing.T) {
	big := []byte(fill("", "# padding\n", "", 12<<20))
	_, err := Parse([]string{"lbd.toml", "conf.d/a.toml", "conf.d/b.toml", "conf.d/c.toml", "conf.d/d.toml", "conf.d/e.toml", "conf.d/f.toml", "conf.d/g.toml"},
		[][]byte{[]byte(svc), []byte(fill("", " ", "", 17<<20)), big, big, big, big, big, big})
	got := []string{}
	if list, ok := err.(ErrorList); ok {
		for _, e := range list {
			got = append(got, e.Error())
		}
	}
	expectErrors(t, got, [][2]string{
		{"conf.d/g.toml: ", "with this file the configuration is larger than 64 MiB in all"},
		{"conf.d/a.toml: ", "larger than 16 MiB, the most lbd reads of one configuration file"},
	})
}

// TestServiceLimit checks that a load takes at most maxServices services.
func TestServiceLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes 100,000 services")
	}
	var b strings.Builder
	for i := range maxServices + 2 {
		fmt.Fprintf(&b, "[[service]]\nname = \"s%d\"\nnode_port = 30000\n", i)
	}
	_, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte("[dataplane]\nnode_cidrs = [\"10.0.0.0/8\"]\n" + b.String())})
	list, _ := err.(ErrorList)
	if len(list) != maxErrors+1 || !strings.Contains(list[len(list)-1].Msg, "more problems not listed") {
		t.Fatalf("%d errors; want %d and a count of the rest", len(list), maxErrors+1)
	}
	s := err.Error()
	if !strings.Contains(s, "lbd.toml:300003:1: service[100000]: is service number 100001; lbd takes at most 100000 services") {
		t.Errorf("no error for service 100001 at its line in:\n%.1000s", s[len(s)-1000:])
	}
}

// TestLimitsBoundMemory measures the heap of loads at the limits: the
// inputs of issue #14 (refused) and the largest files of TOML beyond the
// plain subset (accepted). The bounds are generous: they catch growth with
// the square of the input, not a few per cent.
func TestLimitsBoundMemory(t *testing.T) {
	tests := []struct {
		name  string
		text  string
		bound float64 // MiB
	}{
		{"64 KB nested inline tables", strings.Repeat("a={", 64<<10/3), 16},
		{"200 KB nested arrays", "a = " + strings.Repeat("[", 200<<10), 16},
		{"2 MiB generic, many elements", fill("\"q\" = [", "1,", "]\n", 2<<20-1), 512},
		{"2 MiB generic, many keys", manyKeys("\"q\" = 1\na = {", 2<<20-1), 512},
		{"16 MiB plain, the most elements", fill("a = [", "1,", "]\n", 4_000_000), 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && tt.bound > 16 {
				t.Skip("a large load")
			}
			runtime.GC()
			base := heapAlloc()
			h := startHeapSampler()
			_, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(tt.text)})
			h.done()
			peak := float64(h.inuse.Load()-min(base, h.inuse.Load())) / mib
			t.Logf("%d bytes: peak heap %.1f MiB above the %.1f MiB before; %.120v", len(tt.text), peak, float64(base)/mib, err)
			if err == nil {
				t.Errorf("accepted")
			}
			if peak > tt.bound {
				t.Errorf("peak heap %.1f MiB; want at most %.0f MiB", peak, tt.bound)
			}
		})
	}
}

// manyKeys is an inline table of distinct keys after prefix, of about size
// bytes.
func manyKeys(prefix string, size int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for i := 0; b.Len() < size-20; i++ {
		fmt.Fprintf(&b, "k%d=1,", i)
	}
	b.WriteString("}\n")
	return b.String()
}
