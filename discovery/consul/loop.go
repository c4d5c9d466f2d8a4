package consul

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/lbdproject/lbd/discovery/consul/internal/backoff"
)

// burst is how many requests a long-poll loop, or refreshes, may make back
// to back before MinInterval applies.
const burst = 3

// dcState is one followed datacenter: its two change triggers.
type dcState struct {
	name   string
	cancel context.CancelFunc
	polls  [numPollKinds]pollState // the loop's
	ctl    [numPollKinds]pollCtl   // the pollers'; see resync
	// checks digests the latest /v1/health/state/any answer, to tell
	// which services a change concerns.
	checks map[checkRef]checkDigest
}

type pollState struct {
	index   uint64
	err     error
	outcome bool // answered or failed at least once
	// settled: answered since the latest sign that the agent went away.
	// Its non-blocking re-read was consistent (see pollOnce), so the
	// agent's state store had caught up by then.
	settled bool
}

// ready reports whether both triggers have had a first outcome. Reads of
// a new datacenter wait for it: each trigger's first answer asks for a
// full read, and waiting for both makes that one read instead of two.
func (d *dcState) ready() bool {
	for _, p := range d.polls {
		if !p.outcome {
			return false
		}
	}
	return true
}

// maxIndex is the highest trigger index received: a read sent after it
// includes every change up to it.
func (d *dcState) maxIndex() uint64 {
	var m uint64
	for _, p := range d.polls {
		m = max(m, p.index)
	}
	return m
}

// suspect forgets the datacenter's trigger indexes after a sign that the
// agent went away (see resync): none may count in maxIndex until its
// trigger has read again.
func (d *dcState) suspect() {
	for k := range d.polls {
		d.polls[k].index = 0
		d.polls[k].settled = false
	}
}

// settled reports whether every trigger has answered since the latest
// sign that the agent went away. Until then reads of the datacenter's
// services are consistent: a restarted server's default reads may come
// from a state store that has not replayed its log yet.
func (d *dcState) settled() bool {
	for _, p := range d.polls {
		if !p.settled {
			return false
		}
	}
	return true
}

// fetchState is what is known of one /v1/health/service read.
type fetchState struct {
	instances []Instance // all health states, sorted
	known     bool       // instances hold a usable answer
	answered  bool       // Consul answered at least once, maybe unusably
	err       error      // the latest read failed
	problem   string     // the latest answer was not usable as is
	// seen is the trigger index the latest read is known to include:
	// changes at or below it need no new read.
	seen uint64
	// index is the latest believed answer's X-Consul-Index.
	index uint64
}

// onNodes reports whether any known instance is on one of nodes.
func (fs *fetchState) onNodes(nodes map[string]bool) bool {
	if len(nodes) == 0 {
		return false
	}
	for _, in := range fs.instances {
		if nodes[in.Node] {
			return true
		}
	}
	return false
}

// connState is the connectivity last logged.
type connState int

const (
	connUnknown connState = iota
	connUp
	connDown
)

// loop is the state of one Run. Only Run's goroutine touches it; pollers
// and refreshes report through channels.
type loop struct {
	*Watcher

	queries map[string]Query // in force, by Key
	fetches map[fetchKey]*fetchState
	dcs     map[string]*dcState
	// defaultDC is the datacenter of queries naming none and of tag
	// discovery: Options.Datacenter, else the Client's; "" for the agent's.
	defaultDC string
	tagged    map[string]bool // services carrying the tag; nil until the catalog answered
	// taggedProblem says that more than maxTagged services carry the tag.
	taggedProblem string

	pending      map[fetchKey]bool // to read at the next refresh
	retry        map[fetchKey]bool // failed; read again after a backoff
	refreshing   bool
	refreshLim   *rate.Limiter
	refreshTimer *time.Timer // a refresh waits for refreshLim
	retryTimer   *time.Timer
	retryArmed   bool
	retryBackoff *backoff.Backoff

	events  chan pollEvent
	results chan []fetchResult
	wg      sync.WaitGroup

	active    bool // something has been followed: snapshots are due
	contacted bool // Consul answered at least once
	published *Snapshot
	conn      connState
	logged    map[string]bool // problems logged as present
}

func newLoop(w *Watcher) *loop {
	return &loop{
		Watcher:      w,
		queries:      map[string]Query{},
		fetches:      map[fetchKey]*fetchState{},
		dcs:          map[string]*dcState{},
		defaultDC:    cmp.Or(w.opts.Datacenter, w.opts.Client.dc),
		pending:      map[fetchKey]bool{},
		retry:        map[fetchKey]bool{},
		refreshLim:   rate.NewLimiter(rate.Every(w.opts.MinInterval), burst),
		refreshTimer: stoppedTimer(),
		retryTimer:   stoppedTimer(),
		retryBackoff: backoff.New(w.opts.MinRetry, w.opts.MaxRetry),
		events:       make(chan pollEvent),
		results:      make(chan []fetchResult),
		logged:       map[string]bool{},
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func (l *loop) run(ctx context.Context) {
	defer l.refreshTimer.Stop()
	defer l.retryTimer.Stop()
	periodic := time.NewTicker(l.opts.RefreshInterval)
	defer periodic.Stop()

	l.applyQueries(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.changed:
			l.applyQueries(ctx)
		case ev := <-l.events:
			l.onPoll(ev)
		case res := <-l.results:
			l.onResults(res)
		case <-l.refreshTimer.C:
			// maybeRefresh below starts the refresh that waited.
		case <-l.retryTimer.C:
			l.retryArmed = false
			for k := range l.retry {
				l.pending[k] = true
			}
			clear(l.retry)
		case <-periodic.C:
			for k := range l.fetches {
				l.pending[k] = true
			}
		}
		l.maybeRefresh(ctx)
		l.publish()
	}
}

// applyQueries puts the queries of the latest SetQueries in force.
func (l *loop) applyQueries(ctx context.Context) {
	l.queries = l.Watcher.queries()
	l.ensureFetches()
	l.ensureDCs(ctx)
}

func (l *loop) keyOf(q Query) fetchKey {
	return fetchKey{dc: cmp.Or(q.Datacenter, l.defaultDC), service: q.Service, tags: strings.Join(q.Tags, "\x00")}
}

func (l *loop) taggedKey(service string) fetchKey {
	return fetchKey{dc: l.defaultDC, service: service, tags: l.opts.VirtualServiceTag}
}

// ensureFetches creates the reads the queries and tagged services need,
// to be done at the next refresh, and forgets the others.
func (l *loop) ensureFetches() {
	needed := make(map[fetchKey]bool, len(l.queries)+len(l.tagged))
	for _, q := range l.queries {
		needed[l.keyOf(q)] = true
	}
	for s := range l.tagged {
		needed[l.taggedKey(s)] = true
	}
	for k := range needed {
		if l.fetches[k] == nil {
			l.fetches[k] = &fetchState{}
			l.pending[k] = true
		}
	}
	for k := range l.fetches {
		if !needed[k] {
			delete(l.fetches, k)
			delete(l.pending, k)
			delete(l.retry, k)
		}
	}
}

// ensureDCs starts the change triggers of datacenters that became needed
// and stops those of datacenters no longer needed.
func (l *loop) ensureDCs(ctx context.Context) {
	needed := map[string]bool{}
	for k := range l.fetches {
		needed[k.dc] = true
	}
	if l.opts.VirtualServiceTag != "" {
		needed[l.defaultDC] = true
	}
	for dc := range needed {
		if l.dcs[dc] != nil {
			continue
		}
		dctx, cancel := context.WithCancel(ctx)
		d := &dcState{name: dc, cancel: cancel}
		l.dcs[dc] = d
		l.active = true
		for kind := range numPollKinds {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.poll(dctx, d, kind)
			}()
		}
	}
	for dc, d := range l.dcs {
		if !needed[dc] {
			d.cancel()
			delete(l.dcs, dc)
		}
	}
}

// onPoll takes in a change trigger's outcome.
func (l *loop) onPoll(ev pollEvent) {
	d := ev.owner
	if l.dcs[d.name] != d {
		return // from a datacenter no longer followed
	}
	ps := &d.polls[ev.kind]
	ps.outcome = true
	if ev.err != nil {
		ps.err = ev.err
		d.suspect()
		return
	}
	ps.err = nil
	ps.index = ev.index
	ps.settled = true
	l.contacted = true
	l.log.Debug("Consul change trigger", "endpoint", ev.kind.String(), "datacenter", d.name, "index", ev.index, "reset", ev.reset)
	if ev.reset {
		// A first answer, or one after errors or an index reset: the index
		// may now count from somewhere else, so what earlier reads saw
		// says nothing.
		for k, fs := range l.fetches {
			if k.dc == d.name {
				fs.seen = 0
			}
		}
	}
	switch ev.kind {
	case catalogPoll:
		// Any registration may concern any followed service: the catalog
		// lists names and tags only, not addresses or ports.
		l.markDC(d.name, ev.index, nil)
		if l.opts.VirtualServiceTag != "" && d.name == l.defaultDC {
			l.updateTagged(ev.services)
		}
	case checksPoll:
		digest := digestChecks(ev.checks)
		if ev.reset || d.checks == nil {
			l.markDC(d.name, ev.index, nil)
		} else {
			services, nodes := diffChecks(d.checks, digest)
			l.markDC(d.name, ev.index, func(k fetchKey, fs *fetchState) bool {
				return services[k.service] || fs.onNodes(nodes)
			})
		}
		d.checks = digest
	}
}

// markDC schedules a read of the datacenter's services that match (all
// when match is nil), except those already read after a trigger index of
// at least index.
func (l *loop) markDC(dc string, index uint64, match func(fetchKey, *fetchState) bool) {
	for k, fs := range l.fetches {
		if k.dc != dc || (fs.seen >= index && fs.seen > 0) {
			continue
		}
		if match == nil || match(k, fs) {
			l.pending[k] = true
		}
	}
}

// updateTagged takes in the services carrying the virtual-service tag
// from a catalog answer.
func (l *loop) updateTagged(services map[string][]string) {
	tagged := map[string]bool{}
	for name, tags := range services {
		if slices.Contains(tags, l.opts.VirtualServiceTag) {
			tagged[name] = true
		}
	}
	l.taggedProblem = ""
	if len(tagged) > maxTagged {
		names := slices.Sorted(maps.Keys(tagged))
		for _, n := range names[maxTagged:] {
			delete(tagged, n)
		}
		l.taggedProblem = fmt.Sprintf("more than %d services carry tag %s; lbd follows the first %d by name and ignores the others (from %s on)",
			maxTagged, Quote(l.opts.VirtualServiceTag), maxTagged, Quote(names[maxTagged]))
	}
	l.tagged = tagged
	l.ensureFetches()
}

// maybeRefresh starts a refresh of the pending reads, unless one runs or
// the rate limit says to wait.
func (l *loop) maybeRefresh(ctx context.Context) {
	if l.refreshing || len(l.pending) == 0 {
		return
	}
	var keys []fetchKey
	for k := range l.pending {
		if d := l.dcs[k.dc]; d != nil && d.ready() {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	r := l.refreshLim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		l.refreshTimer.Reset(d)
		return
	}
	consistent := map[string]bool{}
	for _, k := range keys {
		delete(l.pending, k)
		d := l.dcs[k.dc]
		l.fetches[k].seen = d.maxIndex()
		consistent[k.dc] = !d.settled()
	}
	l.log.Debug("reading Consul services", "count", len(keys))
	l.refreshing = true
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		res := l.fetchAll(ctx, keys, consistent)
		select {
		case l.results <- res:
		case <-ctx.Done():
		}
	}()
}

// backwards reports whether r, a default read, answered with an index
// below that of the service's previous answer, and if so reads again,
// consistently. A default read sent while all looked settled can reach
// an agent restarted meanwhile, which answers from a state store that
// has not replayed its log yet (empty, index 1); believed, that answer
// would drain the service. A consistent read waits for the state to
// catch up, and is believed even when the index did go backwards (a
// snapshot restore).
func (l *loop) backwards(r fetchResult, fs *fetchState) bool {
	if r.consistent || !fs.answered || r.index >= fs.index {
		return false
	}
	l.log.Debug("Consul answer's index went backwards; reading again consistently", "service", r.key.String(), "was", fs.index, "now", r.index)
	if d := l.dcs[r.key.dc]; d != nil {
		d.resync(numPollKinds)
		d.suspect()
	}
	fs.seen = 0
	l.pending[r.key] = true
	return true
}

// onResults takes in a refresh's reads.
func (l *loop) onResults(res []fetchResult) {
	l.refreshing = false
	failed := false
	for _, r := range res {
		if r.err != nil && !isAnswered(r.err) {
			// The agent did not answer: the triggers may be waiting on
			// one that is gone or restarted without knowing it.
			for _, d := range l.dcs {
				d.resync(numPollKinds)
				d.suspect()
			}
			break
		}
	}
	for _, r := range res {
		fs := l.fetches[r.key]
		if fs == nil {
			continue // no longer followed
		}
		if r.err != nil {
			fs.err = r.err
			fs.seen = 0 // what it was sent after was not read
			l.retry[r.key] = true
			failed = true
			continue
		}
		l.contacted = true
		if l.backwards(r, fs) {
			continue
		}
		delete(l.retry, r.key)
		fs.err = nil
		fs.answered = true
		fs.index = r.index
		if r.filtered && r.empty {
			// Not "no instances": keep what was known.
			fs.problem = fmt.Sprintf("results filtered by ACLs: the token lacks service:read on %s", r.key)
			continue
		}
		fs.known = true
		fs.instances = r.instances
		problems := r.problems
		if r.filtered {
			problems = append(problems, fmt.Sprintf("some instances of %s are hidden by ACLs (the token may lack node:read)", r.key))
		}
		fs.problem = strings.Join(problems, "; ")
	}
	switch {
	case failed && !l.retryArmed:
		l.retryArmed = true
		l.retryTimer.Reset(l.retryBackoff.Next())
	case len(l.retry) == 0:
		l.retryBackoff.Reset()
	}
}
