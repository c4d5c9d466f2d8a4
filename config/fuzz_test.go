package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse checks that no input crashes the parser, that it returns a
// configuration or errors but never both, that every error points at a
// line of the file (but the count of problems beyond maxErrors), and that
// no error echoes much of the input.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../examples/lbd.toml", "../examples/conf.d/dns.toml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(svc + "real_server = [{address = \"10.0.0.1\", weight = 2}]\n[service.health_check]\ntype = \"http\"\n")
	f.Add("[dataplane]\nnode_cidrs = [\"10.0.0.0/8\"]\n[[service]]\nname = \"n\"\nnode_port = 30001\n")
	// At and past the limits: nesting (in and out of strings), key paths.
	f.Add("a = " + strings.Repeat("[", 31) + strings.Repeat("]", 31) + "\nb = " + strings.Repeat("{c=", 40))
	f.Add("x = \"" + strings.Repeat("[{", 40) + "\" # " + strings.Repeat("[", 40) + "\n[" + strings.Repeat("k.", 40) + "k]\n")
	f.Add(svc + "\"" + strings.Repeat("k", 300) + "\" = \"" + strings.Repeat("v", 300) + "\"\nscheduler = \"" + strings.Repeat("w", 300) + "\"\n")
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("cfg = %v, err = %v: want exactly one", cfg, err)
		}
		var list ErrorList
		if err != nil && !errors.As(err, &list) {
			t.Fatalf("error %T is not an ErrorList", err)
		}
		for i, e := range list {
			more := i == maxErrors && strings.Contains(e.Msg, "more problems not listed")
			if e.Pos.File != "lbd.toml" || e.Pos.Line < 1 && !more {
				t.Errorf("error without a line: %v", e)
			}
			// The longest messages list a table's accepted keys.
			if len(e.Error()) > 1500 {
				t.Errorf("error of %d bytes: %.300s", len(e.Error()), e.Error())
			}
		}
	})
}
