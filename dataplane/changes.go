package dataplane

import (
	"log/slog"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// maxLoggedChanges bounds the lines logChanges writes for one sync: an
// edit that replaces thousands of real servers is summarised.
const maxLoggedChanges = 20

// changeNotes writes a sync's change lines, at most maxLoggedChanges, and
// counts the others.
type changeNotes struct {
	log          *slog.Logger
	logged, more int
}

func (n *changeNotes) note(msg string, args ...any) {
	if n.logged == maxLoggedChanges {
		n.more++
		return
	}
	n.logged++
	n.log.Info(msg, args...)
}

func (n *changeNotes) done() {
	if n.more > 0 {
		n.log.Info("more virtual servers and real servers added or removed", "not_logged", n.more)
	}
}

// logChanges logs the virtual servers and real servers that one sync adds
// or removes, each with where it comes from (a file's line, or Consul),
// so that the log says what a Consul change or an edit did to which real
// server. Weight changes are health's and the configuration audit's to
// tell. prev is the state the previous sync applied; the first sync after
// a start has none (see logFirstChanges).
func logChanges(log *slog.Logger, prev, next []desired.Service) {
	n := changeNotes{log: log}
	desired.Pair(prev, next, func(p, s *desired.Service) {
		switch {
		case s == nil:
			n.note("virtual server removed", "virtual_server", p.Key.String(), "service", p.Name, "source", p.Source.String())
		case p == nil:
			n.note("virtual server added", "virtual_server", s.Key.String(), "service", s.Name, "source", s.Source.String())
		case len(p.Dests) != len(s.Dests) || len(p.Dests) > 0 && &p.Dests[0] != &s.Dests[0]: // shared: nothing changed
			noteDests(&n, s.Key, p.Dests, s.Dests, false)
		}
	})
	n.done()
}

// logFirstChanges logs what the first sync after a start changes in the
// kernel lbd found: kernel is what lbd's own virtual servers held then
// (the restart baseline: sorted by key, with the real servers of a
// weight). A restart adopts what is already there, so only what the
// kernel lacked is "added", and what it held and the state drops,
// "removed"; the virtual servers found as they should be are kept, which
// is told once, at debug level, with their number.
func logFirstChanges(log *slog.Logger, kernel, next []desired.Service) {
	n := changeNotes{log: log}
	kept := 0
	desired.Pair(kernel, next, func(k, s *desired.Service) {
		switch {
		case s == nil:
			n.note("virtual server removed", "virtual_server", k.Key.String(), "note", "found in the kernel at start, no longer configured")
		case k == nil:
			n.note("virtual server added", "virtual_server", s.Key.String(), "service", s.Name, "source", s.Source.String())
		case !noteDests(&n, s.Key, k.Dests, s.Dests, true):
			kept++
		}
	})
	n.done()
	log.Debug("first sync after start: virtual servers found in the kernel kept", "virtual_servers", kept)
}

// noteDests notes the real servers of virtual server key that next has and
// prev lacks, and the reverse, and reports whether there were any. With
// fromKernel, prev is the kernel's at start, which lists only real servers
// of a weight: one next holds at weight 0 tells nothing.
func noteDests(n *changeNotes, key lvs.Key, prev, next []desired.Dest, fromKernel bool) bool {
	changed := false
	for _, d := range next {
		if desired.HasDest(prev, d.Addr) || fromKernel && d.Weight == 0 {
			continue
		}
		changed = true
		n.note("real server added", "virtual_server", key.String(), "real_server", d.Addr.String(), "weight", d.Weight, "source", d.Source().String())
	}
	for _, d := range prev {
		if desired.HasDest(next, d.Addr) {
			continue
		}
		changed = true
		if fromKernel {
			n.note("real server removed", "virtual_server", key.String(), "real_server", d.Addr.String(), "note", "found in the kernel at start, no longer configured")
			continue
		}
		n.note("real server removed", "virtual_server", key.String(), "real_server", d.Addr.String(), "source", d.Source().String(),
			"note", "kept at weight 0 while it drains, unless UDP or drain_timeout is 0")
	}
	return changed
}
