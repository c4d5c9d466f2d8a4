package consul

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxConcurrency  = 8
	DefaultRefreshInterval = 30 * time.Second
	DefaultMinInterval     = 250 * time.Millisecond
	DefaultWaitTime        = 5 * time.Minute
	DefaultRequestTimeout  = 30 * time.Second
	DefaultMinRetry        = time.Second
	DefaultMaxRetry        = 30 * time.Second
)

// Options configure a Watcher. Only Client is required.
type Options struct {
	// Client talks to the agent; see NewClient.
	Client *Client
	// Logger receives one line per change of state (requests start or
	// stop failing, an ACL problem appears or goes away), never one per
	// retry; nil means slog.Default().
	Logger *slog.Logger
	// VirtualServiceTag, when set, makes the Watcher follow every service
	// in Datacenter that carries this tag; see Snapshot.Tagged. "" disables
	// it.
	VirtualServiceTag string
	// Datacenter is the datacenter of queries that name none and of
	// VirtualServiceTag discovery; "" means the Client's default
	// (config.Consul.Datacenter), else the agent's own. A query naming
	// this datacenter and one naming none share their change triggers;
	// when it is the agent's own and its name is not configured, a query
	// naming it is followed separately (two more long-polls).
	Datacenter string
	// MaxConcurrency bounds the non-blocking requests in flight; 0 means
	// DefaultMaxConcurrency.
	MaxConcurrency int
	// RefreshInterval is the period of the full re-read that backs up the
	// change triggers; 0 means DefaultRefreshInterval.
	RefreshInterval time.Duration
	// MinInterval rate-limits each long-poll loop and the refreshes: after
	// a burst of three, at most one per MinInterval. 0 means
	// DefaultMinInterval.
	MinInterval time.Duration
	// WaitTime is how long a long-poll waits for a change; 0 means
	// DefaultWaitTime. Consul caps it at 10 minutes.
	WaitTime time.Duration
	// RequestTimeout bounds non-blocking requests, and is added to
	// WaitTime for long-polls; 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MinRetry and MaxRetry bound the jittered backoff after errors; 0
	// means DefaultMinRetry and DefaultMaxRetry.
	MinRetry, MaxRetry time.Duration
}

// Snapshot is the complete state of everything the Watcher follows. Its
// maps and slices are shared with later snapshots: treat them as read-only.
type Snapshot struct {
	// Services holds the instances of each followed Query by Key(). A query
	// that has not had a usable answer yet is absent, which is not the same
	// as present and empty (Consul answered: no instances). A query whose
	// answers ACLs hide stays absent, or keeps its last known instances,
	// and Err says why.
	Services map[string][]Instance
	// Tagged holds, for every service in Options.Datacenter carrying
	// Options.VirtualServiceTag, its instances that carry the tag, in all
	// health states. It is nil while tag discovery is disabled or the
	// catalog has not answered yet; a service whose instances have not
	// been read yet is absent.
	Tagged map[string][]Instance
	// Synced is true once every followed query, and with tag discovery
	// the catalog and every tagged service, has been answered at least
	// once. An answer refused by ACLs counts as answered (its key stays
	// absent and Err says why), so that one unreadable service cannot hold
	// up the others forever.
	Synced bool
	// Connected is false while requests to Consul fail (and before the
	// first answer): instances are then the last known ones.
	Connected bool
	// Err describes the current problems, "" when there are none: failing
	// requests, ACL-filtered answers, unusable registrations. It never
	// contains the ACL token.
	Err string
}

// Status is the Watcher's state for `lbd status` and metrics.
type Status struct {
	// Connected, Synced and Err are those of the latest snapshot.
	Connected bool
	Synced    bool
	Err       string
	// LastError is the latest failed request's error, kept after it was
	// resolved; LastErrorTime is when it happened.
	LastError     string
	LastErrorTime time.Time
	// LastContact is when Consul last answered a request.
	LastContact time.Time
	// Requests and Errors count requests to Consul and failed ones.
	Requests, Errors uint64
	// Queries is the number of followed queries; Tagged the number of
	// services carrying the virtual-service tag.
	Queries, Tagged int
	// Datacenters describes the change triggers of each datacenter
	// followed ("" is the default datacenter), sorted by name.
	Datacenters []DatacenterStatus
}

// DatacenterStatus is the state of one datacenter's change triggers.
type DatacenterStatus struct {
	Name string
	// CatalogIndex and ChecksIndex are the latest indexes of
	// /v1/catalog/services and /v1/health/state/any.
	CatalogIndex, ChecksIndex uint64
}

// Watcher follows Consul services. Create it with New, give it queries
// with SetQueries, start it with Run and read Updates.
type Watcher struct {
	opts Options
	log  *slog.Logger

	updates chan Snapshot
	changed chan struct{} // 1-slot: SetQueries was called
	started atomic.Bool

	requests, errors atomic.Uint64

	mu      sync.Mutex
	desired map[string]Query // by Key, set by SetQueries
	status  Status
}

// New returns a Watcher for opts. It does nothing until Run.
func New(opts Options) *Watcher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxConcurrency <= 0 {
		opts.MaxConcurrency = DefaultMaxConcurrency
	}
	if opts.RefreshInterval <= 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.MinInterval <= 0 {
		opts.MinInterval = DefaultMinInterval
	}
	if opts.WaitTime <= 0 {
		opts.WaitTime = DefaultWaitTime
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MinRetry <= 0 {
		opts.MinRetry = DefaultMinRetry
	}
	if opts.MaxRetry <= 0 {
		opts.MaxRetry = DefaultMaxRetry
	}
	opts.MaxRetry = max(opts.MaxRetry, opts.MinRetry)
	return &Watcher{
		opts:    opts,
		log:     opts.Logger,
		updates: make(chan Snapshot, 1),
		changed: make(chan struct{}, 1),
		desired: map[string]Query{},
	}
}

// SetQueries replaces the set of followed queries; call it with the whole
// set on every configuration load. It never blocks. Queries new to the set
// are read at once; the instances of queries that left it leave the next
// snapshot. Queries with equal keys are followed once; queries without a
// service name are ignored.
func (w *Watcher) SetQueries(qs []Query) {
	m := make(map[string]Query, len(qs))
	for _, q := range qs {
		if q.Service == "" {
			continue
		}
		q.Tags = normTags(q.Tags)
		m[q.Key()] = q
	}
	w.mu.Lock()
	w.desired = m
	w.mu.Unlock()
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *Watcher) queries() map[string]Query {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.desired)
}

// Updates returns the channel of snapshots. A snapshot is sent only when
// it differs from the previous one. The channel holds at most one unread
// snapshot and a newer one replaces it, so a slow reader never holds up
// the Watcher and always reads the latest state. It is closed when Run
// returns.
func (w *Watcher) Updates() <-chan Snapshot { return w.updates }

// Status returns the Watcher's current state.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	st := w.status
	w.mu.Unlock()
	st.Datacenters = slices.Clone(st.Datacenters)
	st.Requests, st.Errors = w.requests.Load(), w.errors.Load()
	return st
}

func (w *Watcher) setStatus(f func(*Status)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(&w.status)
}

// noteRequest counts a request's outcome for Status.
func (w *Watcher) noteRequest(err error) {
	w.requests.Add(1)
	now := time.Now()
	if err != nil {
		w.errors.Add(1)
		msg := err.Error()
		w.setStatus(func(st *Status) { st.LastError, st.LastErrorTime = msg, now })
		return
	}
	w.setStatus(func(st *Status) { st.LastContact = now })
}

// Run follows Consul until ctx is done, then returns nil. It may be called
// once; it closes Updates when it returns. Errors talking to Consul do not
// end it: they show in snapshots and Status while it retries.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("consul: Run called twice")
	}
	defer close(w.updates)
	if w.opts.Client == nil {
		return errors.New("consul: Options.Client is nil")
	}
	ctx, cancel := context.WithCancel(ctx)
	l := newLoop(w)
	// Stop the pollers and any refresh, and wait for them, before the
	// updates channel closes.
	defer l.wg.Wait()
	defer cancel()
	l.run(ctx)
	return nil
}

// publish sends s, replacing an unread snapshot. Only Run's goroutine
// sends, so the send cannot block after the drain.
func (w *Watcher) publish(s Snapshot) {
	select {
	case <-w.updates:
	default:
	}
	w.updates <- s
}

// joinProblems renders problems for Snapshot.Err: sorted, so that the same
// problems give the same text, and capped, so that 300 failing services do
// not make a 300-line error.
func joinProblems(ps []string) string {
	const maxShown = 5
	slices.Sort(ps)
	ps = slices.Compact(ps)
	if len(ps) > maxShown {
		more := len(ps) - maxShown
		ps = append(ps[:maxShown:maxShown], fmt.Sprintf("and %d more", more))
	}
	return strings.Join(ps, "; ")
}
