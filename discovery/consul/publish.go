package consul

import (
	"reflect"
	"slices"
	"strings"
)

// snapshot renders the current state.
func (l *loop) snapshot() Snapshot {
	s := Snapshot{Services: make(map[string][]Instance, len(l.queries))}
	synced := true
	for key, q := range l.queries {
		fs := l.fetches[l.keyOf(q)]
		if fs.known {
			is := fs.instances
			if q.PassingOnly {
				is = passing(is)
			}
			s.Services[key] = is
		}
		synced = synced && fs.answered
	}
	if l.opts.VirtualServiceTag != "" {
		if l.tagged == nil {
			synced = false
		} else {
			s.Tagged = make(map[string][]Instance, len(l.tagged))
			for name := range l.tagged {
				fs := l.fetches[l.taggedKey(name)]
				if fs.known {
					s.Tagged[name] = fs.instances
				}
				synced = synced && fs.answered
			}
		}
	}
	errs, problems := l.problems()
	s.Synced = synced
	s.Connected = l.contacted && len(errs) == 0
	s.Err = joinProblems(append(errs, problems...))
	return s
}

// problems returns the errors of failing requests and the other problems
// (unusable answers), each unsorted.
func (l *loop) problems() (errs, other []string) {
	for _, d := range l.dcs {
		for _, p := range d.polls {
			if p.err != nil {
				errs = append(errs, p.err.Error())
			}
		}
	}
	if l.taggedProblem != "" {
		other = append(other, l.taggedProblem)
	}
	for _, fs := range l.fetches {
		if fs.err != nil {
			errs = append(errs, fs.err.Error())
		}
		if fs.problem != "" {
			other = append(other, fs.problem)
		}
	}
	return errs, other
}

// publish updates Status, logs changes of state and sends a snapshot if it
// differs from the previous one.
func (l *loop) publish() {
	if !l.active {
		return
	}
	s := l.snapshot()
	errs, problems := l.problems()
	l.logTransitions(errs, problems)

	dcs := make([]DatacenterStatus, 0, len(l.dcs))
	for _, d := range l.dcs {
		dcs = append(dcs, DatacenterStatus{
			Name:         d.name,
			CatalogIndex: d.polls[catalogPoll].index,
			ChecksIndex:  d.polls[checksPoll].index,
		})
	}
	slices.SortFunc(dcs, func(a, b DatacenterStatus) int { return strings.Compare(a.Name, b.Name) })
	l.setStatus(func(st *Status) {
		st.Connected, st.Synced, st.Err = s.Connected, s.Synced, s.Err
		st.Queries, st.Tagged = len(l.queries), len(l.tagged)
		st.Datacenters = dcs
	})

	if l.published != nil && reflect.DeepEqual(*l.published, s) {
		return
	}
	l.published = &s
	l.Watcher.publish(s)
}

// logTransitions logs when requests start or stop failing and when a
// problem appears or goes away: once per change, never per retry.
func (l *loop) logTransitions(errs, problems []string) {
	switch {
	case len(errs) > 0 && l.conn != connDown:
		slices.Sort(errs)
		msg := "Consul requests failing; retrying"
		if l.conn == connUp {
			msg = "Consul requests failing; keeping the last known instances and retrying"
		}
		l.log.Warn(msg, "error", errs[0], "failing", len(errs))
		l.conn = connDown
	case len(errs) == 0 && l.contacted && l.conn != connUp:
		if l.conn == connDown {
			l.log.Info("Consul requests succeeding again")
		} else {
			l.log.Info("following Consul", "queries", len(l.queries))
		}
		l.conn = connUp
	}
	now := make(map[string]bool, len(problems))
	for _, p := range problems {
		now[p] = true
		if !l.logged[p] {
			l.log.Warn("Consul answer not usable", "problem", p)
		}
	}
	for p := range l.logged {
		if !now[p] {
			l.log.Info("Consul problem resolved", "problem", p)
		}
	}
	l.logged = now
}
