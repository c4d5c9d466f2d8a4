package healthcheck

import "time"

// Clock is the time a Manager goes by: when checks are due, when idle
// workers end, and the times that Status and OnResult report. Options.Clock
// nil means the system clock; tests may pass one they move by hand.
//
// A check's deadline is not on it: checkers hand the deadline to the
// kernel (socket deadlines, timers that end a process), which knows only
// the system clock.
type Clock interface {
	// Now is the current time. Its differences must not go backwards
	// (time.Now's monotonic reading): the schedule is kept as durations
	// since the Manager was made.
	Now() time.Time
	// NewTimer returns a timer that fires once d has passed on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is what the scheduler needs of a timer: a *time.Timer's behaviour
// since Go 1.23, where after Reset or Stop the channel holds no value from
// before.
type Timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// systemClock is the Clock of time.Now and time.NewTimer.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (t systemTimer) C() <-chan time.Time        { return t.t.C }
func (t systemTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t systemTimer) Stop() bool                 { return t.t.Stop() }
