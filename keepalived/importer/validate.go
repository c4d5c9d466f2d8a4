package importer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lbdproject/lbd/config"
)

// validate runs lbd's own validation on the output and leaves out, as
// not mapped, each table lbd refuses, with lbd's reason: the output
// always passes `lbd check-config` (but for the programs it names, which
// Options.Executable checks). Each round drops at least one table, and a
// table left out may take others with it (an instance naming a service
// that was left out), hence the rounds.
func (im *importer) validate() error {
	for {
		parts := im.parts()
		var b strings.Builder
		starts := make([]int, len(parts))
		line := 1
		for i, p := range parts {
			if i > 0 {
				b.WriteByte('\n')
				line++
			}
			starts[i] = line
			b.WriteString(p)
			line += strings.Count(p, "\n")
		}
		_, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(b.String())})
		if err == nil {
			return nil
		}
		var list config.ErrorList
		if !errors.As(err, &list) {
			return fmt.Errorf("import keepalived: validating the output: %w", err)
		}
		drop := map[int]string{}
		for _, e := range list {
			i := partAt(starts, e.Pos.Line)
			if i < 0 {
				return fmt.Errorf("import keepalived: the output is invalid (a bug): %w", err)
			}
			if _, ok := drop[i]; !ok {
				drop[i] = e.Msg
				if e.Key != "" {
					drop[i] = e.Key + ": " + e.Msg
				}
			}
		}
		im.drop(drop)
	}
}

// parts are the global tables, then the services.
func (im *importer) parts() []string {
	out := make([]string, 0, len(im.globals)+len(im.out))
	for _, u := range im.globals {
		out = append(out, u.text)
	}
	for _, s := range im.out {
		out = append(out, s.TOML)
	}
	return out
}

// drop leaves out the parts listed, each reported with lbd's reason.
func (im *importer) drop(parts map[int]string) {
	var globals []unit
	for i, u := range im.globals {
		if why, ok := parts[i]; ok {
			im.rep.notMapped(u.node, "lbd refuses the table written for it (%s); not written", why)
			continue
		}
		globals = append(globals, u)
	}
	var services []Service
	for i, s := range im.out {
		if why, ok := parts[len(im.globals)+i]; ok {
			im.rep.notMapped(s.node, "lbd refuses the service written for it (%s); not written", why)
			continue
		}
		services = append(services, s)
	}
	im.globals, im.out = globals, services
}

// partAt is the index of the part holding line, or -1.
func partAt(starts []int, line int) int {
	i := -1
	for j, s := range starts {
		if line >= s {
			i = j
		}
	}
	return i
}
