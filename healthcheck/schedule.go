package healthcheck

// The scheduler: a queue of the started checks by when each is next due,
// the goroutine that starts them when they are due, and the workers that
// run them (see Manager).

import (
	"context"
	"hash/fnv"
	"time"
)

// clock is the scheduler's monotonic time: how long since New, on
// opts.Clock.
func (m *Manager) clock() time.Duration { return m.opts.Clock.Now().Sub(m.origin) }

// start queues the checks that are not queued yet, each due first at its
// offset from now; it reports whether it queued any. m.mu is held.
func (m *Manager) start(checks map[checkID]*check) bool {
	var start []*check
	for _, c := range checks {
		if c.queued {
			continue
		}
		if c.checker == nil {
			ch, err := m.opts.NewChecker(c.hc)
			if err != nil {
				c.lastErr = "cannot check: " + err.Error()
				m.opts.Logger.Error("health check cannot run", "target", c.id.target, "type", c.hc.Type, "error", err)
				continue
			}
			c.checker = ch
			c.offset = offset(c.id, c.hc.Interval)
		}
		start = append(start, c)
	}
	// Now, not before the checkers were made: that can take a while, and
	// the first checks would start late, and stay behind their phase.
	now := m.clock()
	for _, c := range start {
		c.queued = true
		m.queue.push(queued{due: now + c.offset, c: c})
	}
	return len(start) > 0
}

// offset spreads checks over their interval, deterministically per check,
// so that many real servers are not all checked at the same instant.
func offset(id checkID, interval time.Duration) time.Duration {
	h := fnv.New64a()
	h.Write([]byte(id.target.String()))
	h.Write([]byte(id.def))
	return time.Duration(h.Sum64() % uint64(interval))
}

// slack is how much before its slot a check may start, when the scheduler
// is awake for another one anyway, so that checks due close together start
// on one wakeup: 1/100 of its interval, and never more than maxSlack.
func slack(interval time.Duration) time.Duration {
	return min(interval/slackDivisor, maxSlack)
}

const (
	slackDivisor = 100
	maxSlack     = time.Millisecond
)

// handoff is a check for the scheduler to hand to a worker once it has
// released Manager.mu.
type handoff struct {
	w *worker // nil: a new one
	r *checkRun
}

// schedule starts the checks on a fixed schedule: a check is next due a
// whole interval after it was last due, not after it ended, so slow checks
// and a loaded box do not make it slip; a slot that has passed already, or
// that comes while the check of an earlier one still runs, is skipped.
func (m *Manager) schedule(ctx context.Context, wake <-chan struct{}) {
	defer m.running.Done()
	timer := m.opts.Clock.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		runs   []handoff
		retire []*worker
	)
	for {
		m.mu.Lock()
		if !m.active {
			m.mu.Unlock()
			return
		}
		now := m.clock()
		var checkWait, idleWait time.Duration
		runs, checkWait = m.takeDue(now, runs)
		retire, idleWait = m.takeRetiring(now, retire)
		m.mu.Unlock()
		runs = m.handOff(runs)
		retire = retireWorkers(retire)
		if wait := sooner(checkWait, idleWait); wait >= 0 {
			timer.Reset(wait)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-timer.C():
		}
	}
}

// takeDue takes the checks due by now (or within their slack) off the
// front of the queue, queues each again at its next slot, and appends a
// handoff to runs for each that is not still running; it returns runs and
// how long until the next check is due, or -1 if none is queued. m.mu is
// held.
func (m *Manager) takeDue(now time.Duration, runs []handoff) ([]handoff, time.Duration) {
	for len(m.queue) > 0 {
		q := &m.queue[0]
		c := q.c
		if c.removed {
			c.queued = false
			m.queue.pop()
			continue
		}
		if q.due-slack(c.hc.Interval) > now {
			return runs, q.due - now
		}
		q.due = nextSlot(q.due, c.hc.Interval, now)
		m.queue.down(0)
		if c.run != nil {
			continue
		}
		c.run = &checkRun{c: c, target: Target{Addr: c.id.target, Service: c.service}, values: m.values}
		runs = append(runs, handoff{m.takeIdle(), c.run})
	}
	return runs, -1
}

// nextSlot is a check's first slot after due that is still to come at
// now: a whole interval after due, or as many more as have passed.
func nextSlot(due, interval, now time.Duration) time.Duration {
	due += interval
	if due <= now {
		due += interval * ((now-due)/interval + 1)
	}
	return due
}

// takeIdle takes the most recently idle worker, or returns nil if none is
// idle. m.mu is held.
func (m *Manager) takeIdle() *worker {
	n := len(m.idle)
	if n == 0 {
		return nil
	}
	w := m.idle[n-1]
	m.idle[n-1] = nil
	m.idle = m.idle[:n-1]
	return w
}

// takeRetiring takes the workers idle for workerIdle by now and appends
// them to retire; it returns retire and how long until the next idle
// worker is to retire, or -1 if none is idle. m.mu is held.
func (m *Manager) takeRetiring(now time.Duration, retire []*worker) ([]*worker, time.Duration) {
	for len(m.idle) > 0 {
		if left := m.idle[0].idleSince + workerIdle - now; left > 0 {
			return retire, left
		}
		retire = append(retire, m.idle[0])
		m.idle[0] = nil
		m.idle = m.idle[1:]
	}
	return retire, -1
}

// handOff gives each check of runs to its worker, or to a new one; it
// returns runs emptied, to be used again.
func (m *Manager) handOff(runs []handoff) []handoff {
	for i, h := range runs {
		if h.w != nil {
			h.w.work <- h.r
		} else {
			m.running.Add(1)
			go m.worker(h.r)
		}
		runs[i] = handoff{}
	}
	return runs[:0]
}

// retireWorkers tells each worker of retire to end; it returns retire
// emptied, to be used again.
func retireWorkers(retire []*worker) []*worker {
	for i, w := range retire {
		w.work <- nil
		retire[i] = nil
	}
	return retire[:0]
}

// sooner is the shorter of two waits, where -1 is no wait at all (nothing
// to wake up for).
func sooner(a, b time.Duration) time.Duration {
	if a < 0 || (b >= 0 && b < a) {
		return b
	}
	return a
}

// worker runs one check after another, as the scheduler hands them over.
type worker struct {
	work      chan *checkRun // nil: end
	idleSince time.Duration  // on Manager.clock
}

// workerIdle is how long a worker waits for a check before it ends.
const workerIdle = 10 * time.Second

// worker runs r, and then the checks the scheduler hands it, until it is
// told to end.
func (m *Manager) worker(r *checkRun) {
	defer m.running.Done()
	w := &worker{work: make(chan *checkRun, 1)}
	for r != nil && m.check(r, w) {
		r = <-w.work
	}
}

// check runs r and records its result, then queues w as idle; it reports
// false when w is to end instead, as Run has.
func (m *Manager) check(r *checkRun, w *worker) bool {
	c := r.c
	start := m.opts.Clock.Now()
	// The deadline is on the system clock whatever opts.Clock is: checkers
	// hand it to the kernel.
	r.deadline = time.Now().Add(c.hc.Timeout)
	err := m.probe(c, r)
	took := m.opts.Clock.Now().Sub(start)
	r.cancel(context.Canceled) // as a context's CancelFunc: releases what waits on it
	m.mu.Lock()
	c.run = nil
	if !m.active {
		m.mu.Unlock()
		return false
	}
	w.idleSince = m.clock()
	m.idle = append(m.idle, w)
	if c.removed {
		m.mu.Unlock()
		return true
	}
	m.record(c, start, took, err)
	m.mu.Unlock()
	if m.opts.OnResult != nil {
		m.opts.OnResult(c.hc.Type, took, err)
	}
	return true
}

// stop ends the schedule and cancels the checks in flight with err; their
// results are dropped.
func (m *Manager) stop(err error) {
	m.mu.Lock()
	m.active = false
	for _, q := range m.queue {
		q.c.queued = false
	}
	m.queue = nil
	var canceled []*checkRun
	for _, c := range m.checks {
		if c.run != nil {
			canceled = append(canceled, c.run)
		}
	}
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, r := range canceled {
		r.cancel(err)
	}
	for _, w := range idle {
		w.work <- nil
	}
}

// checkQueue is a 4-ary min-heap of checks by when they are next due;
// the times are in the heap, not behind its pointers, so that ordering it
// does not walk memory all over.
type checkQueue []queued

type queued struct {
	due time.Duration // the check's next slot, on Manager.clock
	c   *check
}

func (q *checkQueue) push(e queued) {
	*q = append(*q, e)
	q.up(len(*q) - 1)
}

// pop removes the first check.
func (q *checkQueue) pop() {
	last := len(*q) - 1
	(*q)[0] = (*q)[last]
	(*q)[last] = queued{}
	*q = (*q)[:last]
	q.down(0)
}

func (q checkQueue) up(i int) {
	e := q[i]
	for i > 0 {
		p := (i - 1) / 4
		if q[p].due <= e.due {
			break
		}
		q[i] = q[p]
		i = p
	}
	q[i] = e
}

func (q checkQueue) down(i int) {
	if i >= len(q) {
		return
	}
	e := q[i]
	for {
		first := 4*i + 1
		if first >= len(q) {
			break
		}
		j := first
		for k := first + 1; k < first+4 && k < len(q); k++ {
			if q[k].due < q[j].due {
				j = k
			}
		}
		if e.due <= q[j].due {
			break
		}
		q[i] = q[j]
		i = j
	}
	q[i] = e
}
