package tree

import (
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/lbdproject/lbd/config/internal/keypos"
)

// accepted are documents Parse must handle itself.
var accepted = []string{
	"",
	"# only a comment",
	"a = 1\n",
	"a = 1",
	"a=1\r\nb = -2 # c\r\n\r\n",
	"a = \"x\"\nb = 'y\\z'\nc = \"\"\nd = ''\ne = \"tab\there\"\nf = \"ünï #ç\"\n",
	"a = true\nb = false\nc = 0\nd = -0\ne = +5\nf = 0.5\ng = -12.25\nh = +0.0\ni = 9223372036854775807\n",
	"[sync]\nmin_sync_period = \"1s\"   # comment\n  burst=3\n",
	"[ a . b ]\nx = 1\n[a.c]\ny = 2\n",
	"[[service]]\nname = \"web\"\nvips = [\n  \"192.0.2.1\", # first\n  \"192.0.2.2\",\n]\n" +
		"[service.health_check]\ntype = \"http\"\n[[service.real_server]]\naddress = \"10.0.0.1\"\n[[service.real_server]]\naddress = \"10.0.0.2\"\n" +
		"  [service.real_server.health_check]\n  port = 8080\n[[service]]\nname = \"dns\"\n" +
		"real_servers = [ { address = \"10.0.0.3\", port = 53 },\n                 { address = \"10.0.0.4\" } ]\nnested = [[1, 2], [3], []]\n",
	"x = [{a = 1}, {b = [{c = 2}]}, {}]\ny = {}\nz = { a = { b = 1 }, c = [] }\n",
	"x = { a = 1, }\ny = {\n  a = 1, # c\n  b = 2\n}\n",
	"x = [ # c\n 1,\n ]\n",
	"[[a]]\n[[a.b]]\nx = 1\n[[a.b]]\n[[a]]\n[a.c.d]\n[a.c.e]\n[[a.b]]\n",
	"[a.b.c]\n[a.b.d]\n[a.e]\n",
	"k = 1\n[t]\nk = 2\n[[t.u]]\nk = 3\n",
	"s = [\"a\", 1, 2.5, true, [], {}]\n",
}

// refused are valid or invalid documents Parse must leave to BurntSushi.
var refused = []string{
	"\uFEFFa = 1\n",
	"a = 1\rb = 2\n",
	"a = \"\x01\"\n",
	"a = \"\\n\"\n",
	"a = \"\"\"x\"\"\"\n",
	"a = '''x'''\n",
	"\"a\" = 1\n",
	"a.b = 1\n",
	"a = 1979-05-27\n",
	"a = 07:32:00\n",
	"a = 1e5\n",
	"a = 1_000\n",
	"a = 0x10\n",
	"a = 01\n",
	"a = inf\n",
	"a = nan\n",
	"a = 99999999999999999999\n",
	"a = 1\na = 2\n",
	"[a]\n[a]\n",
	"[a.b]\n[a]\n",
	"a = {}\n[a.b]\n",
	"a = [{}]\n[[a]]\n",
	"[[a]]\n[a]\n",
	"[a]\n[[a]]\n",
	"a = 1\n[a.b]\n",
	"a = { b = 1, b = 2 }\n",
	"a = 1 b = 2\n",
	"[a] b = 1\n",
	"a = [1,,2]\n",
	"a = [,]\n",
	"a = { , }\n",
	"a = tru\n",
	"a = truex\n",
	"a = \"x\n\"\n",
	"a = \xff\n",
	"[[a] ]\n",
	"a = " + strings.Repeat("[", 40) + strings.Repeat("]", 40) + "\n",
}

func TestParseAccepts(t *testing.T) {
	for _, src := range accepted {
		if _, _, ok := Parse(src); !ok {
			t.Errorf("refused %q", src)
		}
		checkAgainstOracles(t, src)
	}
	for _, p := range []string{"../../../examples/lbd.toml", "../../../examples/conf.d/dns.toml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, ok := Parse(string(b)); !ok {
			t.Errorf("refused %s", p)
		}
		checkAgainstOracles(t, string(b))
	}
}

func TestParseRefuses(t *testing.T) {
	for _, src := range refused {
		if _, _, ok := Parse(src); ok {
			t.Errorf("accepted %q", src)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range accepted {
		f.Add(s)
	}
	for _, s := range refused {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		checkAgainstOracles(t, src)
	})
}

// checkAgainstOracles checks that when Parse accepts src, BurntSushi/toml
// accepts it too and decodes the same values, and that Find answers as the
// lookup in keypos.Scan's map did, for every path there and around.
func checkAgainstOracles(t *testing.T, src string) {
	t.Helper()
	root, _, ok := Parse(src)
	if !ok {
		return
	}
	var m map[string]any
	if _, err := toml.Decode(src, &m); err != nil {
		t.Fatalf("Parse accepted what BurntSushi/toml refuses (%v):\n%s", err, src)
	}
	if d := diff("", root, FromMap(m)); d != "" {
		t.Fatalf("values differ from BurntSushi/toml's: %s\n%s", d, src)
	}
	old := keypos.Scan(src)
	ours := map[string]Pos{}
	paths("", root, ours)
	for p, w := range old {
		if g, ok := ours[p]; !ok || g.Line != int32(w.Line) || g.Col != int32(w.Col) {
			t.Errorf("%s: tree has %v (%v), keypos %v\n%s", p, g, ok, w, src)
		}
	}
	for p := range ours {
		if _, ok := old[p]; !ok {
			t.Errorf("%s: in the tree, not in keypos's map\n%s", p, src)
		}
	}
	var probes []string
	for p := range old {
		probes = append(probes, p, p+".x", p+"[0]", p+"[1]", p+"[01]", p+"[-1]", p+"[0].x", p+"x", p+".", p+"[", p+"]", p+"..x")
	}
	probes = append(probes, "", ".", "[0]", "x", "x.y", "service[0].real_server[1].address")
	for _, p := range probes {
		g, gok := root.Find(p)
		w, wok := oldAt(old, p)
		if gok != wok || g.Line != int32(w.Line) || g.Col != int32(w.Col) {
			t.Errorf("Find(%q) = %v %v, keypos lookup %v %v\n%s", p, g, gok, w, wok, src)
		}
	}
}

// oldAt is config's lookup before package tree.
func oldAt(m map[string]keypos.Pos, path string) (keypos.Pos, bool) {
	for p := path; p != ""; p = parent(p) {
		if kp, ok := m[p]; ok {
			return kp, true
		}
	}
	return keypos.Pos{}, false
}

// paths lists the position of every key and element under v, keyed by
// path as keypos writes them.
func paths(prefix string, v any, out map[string]Pos) {
	switch x := v.(type) {
	case *Table:
		for _, e := range x.Entries() {
			p := e.Key
			if prefix != "" {
				p = prefix + "." + e.Key
			}
			out[p] = e.Pos
			paths(p, e.Val, out)
		}
	case *Array:
		for i, e := range x.Elems {
			p := prefix + "[" + strconv.Itoa(i) + "]"
			out[p] = x.Pos[i]
			paths(p, e, out)
		}
	}
}

// diff compares two trees' values, not their positions.
func diff(path string, a, b any) string {
	switch x := a.(type) {
	case *Table:
		y, ok := b.(*Table)
		if !ok {
			return fmt.Sprintf("%s: table against %T", path, b)
		}
		keys := func(t *Table) []string {
			var k []string
			for _, e := range t.Entries() {
				k = append(k, e.Key)
			}
			slices.Sort(k)
			return k
		}
		if ka, kb := keys(x), keys(y); !slices.Equal(ka, kb) {
			return fmt.Sprintf("%s: keys %q against %q", path, ka, kb)
		}
		for _, e := range x.Entries() {
			v, _ := y.Get(e.Key)
			if d := diff(path+"."+e.Key, e.Val, v); d != "" {
				return d
			}
		}
	case *Array:
		y, ok := b.(*Array)
		if !ok {
			return fmt.Sprintf("%s: array against %T", path, b)
		}
		if x.Headers != y.Headers || len(x.Elems) != len(y.Elems) {
			return fmt.Sprintf("%s: array of %d (headers %v) against %d (%v)", path, len(x.Elems), x.Headers, len(y.Elems), y.Headers)
		}
		for i := range x.Elems {
			if d := diff(fmt.Sprintf("%s[%d]", path, i), x.Elems[i], y.Elems[i]); d != "" {
				return d
			}
		}
	default:
		if reflect.TypeOf(a) != reflect.TypeOf(b) || a != b {
			return fmt.Sprintf("%s: %T %#v against %T %#v", path, a, a, b, b)
		}
	}
	return ""
}
