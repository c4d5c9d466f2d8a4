package dataplane

import (
	"log/slog"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// maxLoggedChanges bounds the lines logChanges writes for one sync: an
// edit that replaces thousands of real servers is summarised.
const maxLoggedChanges = 20

// logChanges logs the virtual servers and real servers that one sync adds
// or removes, each with where it comes from (a file's line, or Consul),
// so that the log says what a Consul change or an edit did to which real
// server. Weight changes are health's and the configuration audit's to
// tell. The caller skips the first sync (it would list everything).
func logChanges(log *slog.Logger, prev, next []desired.Service) {
	logged, more := 0, 0
	note := func(msg string, args ...any) {
		if logged == maxLoggedChanges {
			more++
			return
		}
		logged++
		log.Info(msg, args...)
	}
	desired.Pair(prev, next, func(p, n *desired.Service) {
		switch {
		case n == nil:
			note("virtual server removed", "virtual_server", p.Key.String(), "service", p.Name, "source", p.Source.String())
		case p == nil:
			note("virtual server added", "virtual_server", n.Key.String(), "service", n.Name, "source", n.Source.String())
		case len(p.Dests) != len(n.Dests) || len(p.Dests) > 0 && &p.Dests[0] != &n.Dests[0]: // shared: nothing changed
			for _, d := range n.Dests {
				if !desired.HasDest(p.Dests, d.Addr) {
					note("real server added", "virtual_server", n.Key.String(), "real_server", d.Addr.String(), "weight", d.Weight, "source", d.Source().String())
				}
			}
			for _, d := range p.Dests {
				if !desired.HasDest(n.Dests, d.Addr) {
					note("real server removed", "virtual_server", n.Key.String(), "real_server", d.Addr.String(), "source", d.Source().String(),
						"note", "kept at weight 0 while it drains, unless UDP or drain_timeout is 0")
				}
			}
		}
	})
	if more > 0 {
		log.Info("more virtual servers and real servers added or removed", "not_logged", more)
	}
}
