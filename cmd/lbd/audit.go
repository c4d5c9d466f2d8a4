package main

import (
	"log/slog"

	"github.com/lbdproject/lbd/config"
)

// serviceChanges names the services a new configuration adds, removes and
// changes; where they sit in the files does not count.
func serviceChanges(old, cur *config.Config) (added, removed, changed []string) {
	before := map[string]*config.Service{}
	if old != nil {
		for i := range old.Services {
			before[old.Services[i].Name] = &old.Services[i]
		}
	}
	for i := range cur.Services {
		s := &cur.Services[i]
		o, ok := before[s.Name]
		switch {
		case !ok:
			added = append(added, s.Name)
		case !o.Same(s):
			changed = append(changed, s.Name)
		}
		delete(before, s.Name)
	}
	if old != nil {
		for _, s := range old.Services {
			if _, gone := before[s.Name]; gone {
				removed = append(removed, s.Name)
			}
		}
	}
	return added, removed, changed
}

// audit logs one line per configuration taken into force: its hash and
// what it changed.
func audit(log *slog.Logger, hash string, old, cur *config.Config) {
	added, removed, changed := serviceChanges(old, cur)
	log.Info("configuration in force", "hash", hash, "files", len(cur.Files), "services", len(cur.Services),
		"added", added, "removed", removed, "changed", changed)
}
