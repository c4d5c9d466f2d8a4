package prescan

import (
	"strings"
	"testing"
)

var wide = Limits{Depth: 1 << 30, Values: 1 << 30, PathBytes: 1 << 30}

func TestScanMeasures(t *testing.T) {
	tests := []struct {
		name                   string
		src                    string
		depth, values, pathLen int
	}{
		{"empty", "", 0, 0, 0},
		{"one key", "a = 1\n", 1, 1, 2},
		{"header and keys", "[sync]\nburst = 2\nsync_period = \"1s\"\n", 2, 3, 4 + 10 + 16},
		{"dotted header", "[service.health_check]\ntype = \"tcp\"\n", 3, 2, 20 + 25},
		{"array elements", "vips = [\"a\", \"b\", 3]\n", 2, 4, 5 + 3*8},
		{"multi-line array", "vips = [\n  \"a\", # c ]]]\n  \"b\",\n]\n", 2, 3, 5 + 2*8},
		{"inline table", "a = {b = 1, c = {d = 2}}\n", 5, 4, 2 + 4 + 4 + 6},
		{"brackets in strings and comments", "a = \"[[[{{{\" # [[[[{{{{\nb = '[[[['\nc = \"\"\"\n[[[\n\"\"\"\nd = '''\n{{{\n'''\n", 1, 4, 8},
		{"escaped quote", "a = \"\\\"[[[\"\nb = 1\n", 1, 2, 4},
		{"quoted key", "\"a.b\" = 1\n", 1, 1, 6},
		{"dotted key", "a.b.c = 1\n", 3, 1, 6},
		{"array of inline tables", "[[service]]\nreal_server = [{address = \"x\"}, {address = \"y\"}]\n",
			5, 6, 7 + 19 + 2*22 + 2*30},
		// lbd's deepest: a real server's check written inline.
		{"lbd inline check", "[[service]]\nreal_server = [{ health_check = { expect_status = [200] } }]\n", 8, 6, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Scan(tt.src, wide)
			if r.Exceeded != NoLimit || r.MaxDepth != tt.depth || r.Values != tt.values || (tt.pathLen != 0 && r.PathBytes != tt.pathLen) {
				t.Errorf("Scan = %+v; want depth %d, %d values, %d path bytes", r, tt.depth, tt.values, tt.pathLen)
			}
		})
	}
}

func TestScanStops(t *testing.T) {
	lim := Limits{Depth: 32, Values: 100, PathBytes: 100000}
	tests := []struct {
		name      string
		src       string
		limit     Limit
		line, col int
	}{
		{"nested arrays", "a = " + strings.Repeat("[", 100), Depth, 1, 36},
		{"nested inline tables", "\n" + strings.Repeat("a={", 100), Depth, 2, 3*16 + 2},
		{"nested arrays across lines", "a = [\n" + strings.Repeat("[\n", 100), Depth, 32, 1},
		{"unterminated inline tables", strings.Repeat("a={", 10000), Depth, 1, 3*16 + 2},
		{"dotted header", "[" + strings.Repeat("a.", 40) + "a]\n", Depth, 1, 83},
		{"dotted key", strings.Repeat("a.", 40) + "a = 1\n", Depth, 1, 83},
		{"many keys", strings.Repeat("a = 1\n", 200), Values, 101, 3},
		{"many elements", "a = [" + strings.Repeat("1,", 200) + "]", Values, 1, 204},
		{"long header over many keys", strings.Repeat("x", 40000) + "= 1\n[" + strings.Repeat("x", 30000) + "]\na = 1\nb = 1\nc = 1\n", PathBytes, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Scan(tt.src, lim)
			if r.Exceeded != tt.limit || r.Line != tt.line || r.Col != tt.col {
				t.Errorf("Scan = %+v; want limit %d at %d:%d", r, tt.limit, tt.line, tt.col)
			}
		})
	}
}

// TestScanIsLean checks that a scan allocates nothing per byte of its
// input: only the stack of open brackets, which the depth limit bounds.
func TestScanIsLean(t *testing.T) {
	var b strings.Builder
	for range 10000 {
		b.WriteString("[[service]]\nname = \"x\"\nreal_server = [{address = \"10.0.0.1\", port = 80}, {address = \"10.0.0.2\"}]\n")
	}
	src := b.String()
	allocs := testing.AllocsPerRun(5, func() { Scan(src, Limits{Depth: 32, Values: 1 << 30, PathBytes: 1 << 30}) })
	if allocs > 10 {
		t.Errorf("%.0f allocations for a %d-byte scan; want a handful", allocs, len(src))
	}
}

func FuzzScan(f *testing.F) {
	f.Add("a = [[1], {b = \"]\"}]\n[x.y]\nz = '''\n]]\n'''\n")
	f.Fuzz(func(t *testing.T, src string) {
		r := Scan(src, Limits{Depth: 8, Values: 50, PathBytes: 500})
		if r.Exceeded == NoLimit && (r.MaxDepth > 8 || r.Values > 50 || r.PathBytes > 500) {
			t.Fatalf("limits exceeded unreported: %+v", r)
		}
		if r.Exceeded != NoLimit && (r.Line < 1 || r.Col < 1 || r.Line > strings.Count(src, "\n")+1) {
			t.Fatalf("bad position: %+v", r)
		}
	})
}
