package healthcheck

// The context each check runs with.

import (
	"context"
	"sync"
	"time"
)

// checkRun is one check in flight, and the context its checker gets: it
// holds the check's deadline and is canceled when the check is removed or
// Run ends. It costs one allocation and, unless the checker waits on Done
// or AfterFunc, no timer: Err compares the deadline with the system clock.
// Values are those of Run's context.
type checkRun struct {
	c        *check
	target   Target
	values   context.Context
	deadline time.Time // set before the check starts

	mu    sync.Mutex
	err   error
	done  chan struct{} // made by the first Done
	timer *time.Timer   // fires at the deadline, once something waits for it
	after []*runAfter
}

type runAfter struct{ f func() } // f nil: ran or stopped

func (r *checkRun) Deadline() (time.Time, bool) { return r.deadline, true }

func (r *checkRun) Value(key any) any { return r.values.Value(key) }

func (r *checkRun) String() string { return "healthcheck.checkRun" }

func (r *checkRun) Err() error {
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	if err != nil || time.Until(r.deadline) > 0 {
		return err
	}
	r.cancel(context.DeadlineExceeded)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *checkRun) Done() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done == nil {
		r.done = make(chan struct{})
		if r.err != nil {
			close(r.done)
		} else {
			r.arm()
		}
	}
	return r.done
}

// AfterFunc makes context.AfterFunc, and contexts made from this one,
// wait for it without a goroutine of their own.
func (r *checkRun) AfterFunc(f func()) (stop func() bool) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &runAfter{f: f}
	r.after = append(r.after, a)
	r.arm()
	r.mu.Unlock()
	return func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		stopped := a.f != nil
		a.f = nil
		return stopped
	}
}

// arm starts the deadline's timer; r.mu is held and r not done.
func (r *checkRun) arm() {
	if r.timer == nil {
		r.timer = time.AfterFunc(time.Until(r.deadline), func() { r.cancel(context.DeadlineExceeded) })
	}
}

// cancel ends r with err unless it has ended already.
func (r *checkRun) cancel(err error) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	if r.done != nil {
		close(r.done)
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	var fs []func()
	for _, a := range r.after {
		if a.f != nil {
			fs = append(fs, a.f)
			a.f = nil
		}
	}
	r.after = nil
	r.mu.Unlock()
	for _, f := range fs {
		go f()
	}
}
