package config_test

import (
	"slices"
	"testing"

	"github.com/lbdproject/lbd/config"
)

func TestChanges(t *testing.T) {
	parse := func(text string) *config.Config {
		cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	svc := func(name, vip string, weight int) string {
		return "[[service]]\nname = \"" + name + "\"\nvips = [\"" + vip + "\"]\nport = 80\nreal_server = [{ address = \"10.0.0.1\", weight = " + string(rune('0'+weight)) + " }]\n"
	}
	old := parse(svc("a", "192.0.2.1", 1) + svc("b", "192.0.2.2", 1) + svc("c", "192.0.2.3", 1))
	cur := parse("# a comment moves everything down\n" + svc("a", "192.0.2.1", 1) + svc("c", "192.0.2.3", 2) + svc("d", "192.0.2.4", 1))
	tests := []struct {
		name                    string
		old, cur                *config.Config
		added, removed, changed []string
	}{
		{"first configuration", nil, old, []string{"a", "b", "c"}, nil, nil},
		{"edit", old, cur, []string{"d"}, []string{"b"}, []string{"c"}},
		{"no change", cur, cur, nil, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, r, c := config.Changes(tt.old, tt.cur)
			if !slices.Equal(a, tt.added) || !slices.Equal(r, tt.removed) || !slices.Equal(c, tt.changed) {
				t.Errorf("added %v removed %v changed %v; want %v %v %v", a, r, c, tt.added, tt.removed, tt.changed)
			}
		})
	}
}
