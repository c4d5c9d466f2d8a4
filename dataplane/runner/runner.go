// Package runner runs a sync function at a bounded frequency, in the manner
// of kube-proxy's BoundedFrequencyRunner: requests coalesce, syncs run at
// most once per MinInterval (after a small burst), at least once per
// MaxInterval, and a failed sync is retried with exponential backoff.
//
// Unlike kube-proxy's, the sync function returns its error, so retries
// actually happen, and it is told why it runs: the first sync, periodic
// syncs, retries and repairs are full reconciles against a kernel dump,
// requested ones may apply a diff against what was last written. Only
// full syncs restart the period, so requests never put off drift repair.
// Repair asks for a full sync within MinInterval, for drift the kernel
// told about; a pending repair turns a pending request into a full sync.
// A request after a failure stays a requested sync: what a failed write
// left uncertain is for the appliers to re-read (each does), while the
// retry that follows the backoff is a full one.
package runner

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/time/rate"
)

// Reason says why a sync runs.
type Reason int

const (
	// Requested: Run was called (a configuration, discovery or health change).
	Requested Reason = iota
	// Periodic: MaxInterval passed without a sync.
	Periodic
	// Retry: the previous sync failed.
	Retry
	// Initial: the first sync; nothing has been cached yet, so it
	// reconciles against the kernel like a periodic one.
	Initial
	// Drift: Repair was called (the kernel told of a change lbd did not
	// make); a full reconcile, as soon as MinInterval allows.
	Drift
	// Release: the last sync as lbd stops, outside the loop, giving up
	// what a failover pair's standby must not hold; it writes only what
	// changed.
	Release
)

func (r Reason) String() string {
	switch r {
	case Requested:
		return "requested"
	case Periodic:
		return "periodic"
	case Retry:
		return "retry"
	case Initial:
		return "initial"
	case Drift:
		return "drift"
	case Release:
		return "release"
	}
	return "unknown"
}

// Full reports whether a sync for this reason should reconcile against a
// fresh dump of the kernel rather than trust what it last wrote.
func (r Reason) Full() bool { return r != Requested && r != Release }

// SyncFunc does one sync. Its error schedules a retry.
type SyncFunc func(ctx context.Context, why Reason) error

// Options configures a Runner. Zero values take the defaults noted.
type Options struct {
	MinInterval time.Duration // default 1s
	MaxInterval time.Duration // default 30s
	Burst       int           // default 2
	RetryMin    time.Duration // first retry delay; default 1s
	RetryMax    time.Duration // longest retry delay; default min(MaxInterval, 30s)
	Logger      *slog.Logger
}

// Runner is a bounded-frequency sync loop. Create it with New, start Loop
// in one goroutine, call Run from anywhere.
type Runner struct {
	fn      SyncFunc
	opts    Options
	limiter *rate.Limiter
	// requests holds at most one pending Run, repairs one pending Repair,
	// urgent one pending Now: further calls coalesce.
	requests, repairs, urgent chan struct{}
}

// New returns a Runner for fn.
func New(fn SyncFunc, opts Options) *Runner {
	if opts.MinInterval < 0 {
		opts.MinInterval = 0
	}
	if opts.MaxInterval <= 0 {
		opts.MaxInterval = 30 * time.Second
	}
	if opts.Burst <= 0 {
		opts.Burst = 2
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = min(opts.MaxInterval, 30*time.Second)
	}
	opts.RetryMax = max(opts.RetryMax, opts.RetryMin)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	limit := rate.Inf
	if opts.MinInterval > 0 {
		limit = rate.Every(opts.MinInterval)
	}
	return &Runner{
		fn:       fn,
		opts:     opts,
		limiter:  rate.NewLimiter(limit, opts.Burst),
		requests: make(chan struct{}, 1),
		repairs:  make(chan struct{}, 1),
		urgent:   make(chan struct{}, 1),
	}
}

// Now asks for a sync at once, ahead of the rate limit: for the rare
// change that cannot wait up to MinInterval (a failover taking addresses
// over). It never blocks and coalesces like Run.
func (r *Runner) Now() {
	select {
	case r.urgent <- struct{}{}:
	default:
	}
}

// Run asks for a sync soon. It never blocks; requests made while one is
// pending or a sync is running coalesce into one more sync.
func (r *Runner) Run() {
	select {
	case r.requests <- struct{}{}:
	default:
	}
}

// Repair asks for a full sync soon, rate-limited like Run. It never
// blocks; it coalesces with other Repair and Run calls into one full sync.
func (r *Runner) Repair() {
	select {
	case r.repairs <- struct{}{}:
	default:
	}
}

// Loop runs syncs until ctx is done. It does not sync before the first Run
// or Repair or the first MaxInterval, so the caller decides when the state
// is complete enough to apply.
func (r *Runner) Loop(ctx context.Context) {
	periodic := time.NewTimer(r.opts.MaxInterval)
	defer periodic.Stop()
	retry := time.NewTimer(0)
	retry.Stop()
	defer retry.Stop()
	backoff := time.Duration(0)
	first := true

	for {
		var why Reason
		urgent := false
		select {
		case <-ctx.Done():
			return
		case <-r.requests:
			why = Requested
		case <-r.urgent:
			why, urgent = Requested, true
			r.limiter.Allow() // counted, never waited for
		case <-r.repairs:
			why = Drift
		case <-periodic.C:
			why = Periodic
		case <-retry.C:
			why = Retry
		}
		if !urgent && !r.wait(ctx) {
			return
		}
		why = r.coalesce(why)
		if first {
			why, first = Initial, false
		}

		err := r.fn(ctx, why)
		// Only a full sync restarts the period: requested syncs trust the
		// cache, so a steady stream of them must not put off the dump that
		// repairs drift (kube-proxy resets after every sync because all of
		// its syncs are full).
		if why.Full() {
			periodic.Reset(r.opts.MaxInterval)
		}
		if err == nil {
			backoff = 0
			retry.Stop()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		backoff = min(max(2*backoff, r.opts.RetryMin), r.opts.RetryMax)
		r.opts.Logger.Warn("sync failed; retrying", "reason", why.String(), "retry_in", backoff, "error", err)
		retry.Reset(backoff)
	}
}

// coalesce takes the requests and repairs made while waiting: the sync
// about to run covers them, as a full one when a repair is among them.
func (r *Runner) coalesce(why Reason) Reason {
	select {
	case <-r.requests:
	default:
	}
	select {
	case <-r.repairs:
		if !why.Full() {
			why = Drift
		}
	default:
	}
	return why
}

// wait blocks until the rate limit allows a sync, or Now asks for one;
// false if ctx ended.
func (r *Runner) wait(ctx context.Context) bool {
	select {
	case <-r.urgent:
		r.limiter.Allow()
		return true
	default:
	}
	res := r.limiter.Reserve()
	d := res.Delay()
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	case <-r.urgent:
		res.Cancel()
		return true
	}
}
