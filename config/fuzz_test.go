package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzParse checks that no input crashes the parser, that it returns a
// configuration or errors but never both, and that every error points at a
// line of the file.
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
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("cfg = %v, err = %v: want exactly one", cfg, err)
		}
		var list ErrorList
		if err != nil && !errors.As(err, &list) {
			t.Fatalf("error %T is not an ErrorList", err)
		}
		for _, e := range list {
			if e.Pos.File != "lbd.toml" || e.Pos.Line < 1 {
				t.Errorf("error without a line: %v", e)
			}
		}
	})
}
