package dataplane

import (
	"log/slog"
	"net/netip"
	"slices"

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
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		c := 0
		switch {
		case i == len(prev):
			c = 1
		case j == len(next):
			c = -1
		default:
			c = prev[i].Key.Compare(next[j].Key)
		}
		switch {
		case c < 0:
			note("virtual server removed", "virtual_server", prev[i].Key.String(), "service", prev[i].Name, "source", prev[i].Source.String())
			i++
		case c > 0:
			note("virtual server added", "virtual_server", next[j].Key.String(), "service", next[j].Name, "source", next[j].Source.String())
			j++
		default:
			p, n := prev[i].Dests, next[j].Dests
			if len(p) != len(n) || len(p) > 0 && &p[0] != &n[0] { // shared: nothing changed
				for _, d := range n {
					if !hasDest(p, d) {
						note("real server added", "virtual_server", next[j].Key.String(), "real_server", d.Addr.String(), "weight", d.Weight, "source", d.Source().String())
					}
				}
				for _, d := range p {
					if !hasDest(n, d) {
						note("real server removed", "virtual_server", next[j].Key.String(), "real_server", d.Addr.String(), "source", d.Source().String(),
							"note", "kept at weight 0 while it drains, unless UDP or drain_timeout is 0")
					}
				}
			}
			i++
			j++
		}
	}
	if more > 0 {
		log.Info("more virtual servers and real servers added or removed", "not_logged", more)
	}
}

func hasDest(ds []desired.Dest, d desired.Dest) bool {
	_, ok := slices.BinarySearchFunc(ds, d.Addr, func(x desired.Dest, a netip.AddrPort) int { return x.Addr.Compare(a) })
	return ok
}
