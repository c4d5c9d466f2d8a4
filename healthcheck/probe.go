package healthcheck

// A check that panics: decoding what a real server sent is where a bug
// would meet hostile input, and it must fail that check, not the daemon.

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/lbdproject/lbd/config"
)

// panicLogEvery is how often one check's panics are logged, with their
// stack: a real server that makes every check panic must not flood the
// log, and one stack is what the bug report needs.
const panicLogEvery = time.Hour

// probePanic is a check that panicked: a failed check, as the result says.
type probePanic struct {
	typ   config.CheckType
	value string // outsideText of the panic's value: it may quote the answer
}

func (e *probePanic) Error() string {
	return fmt.Sprintf("internal error in the %s check while reading the answer: %s", e.typ, e.value)
}

// probe runs c's checker on r; a panic in it is recovered into a failed
// check (probePanic), and logged with its stack, at most once per
// panicLogEvery per check.
func (m *Manager) probe(c *check, r *checkRun) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = m.probePanicked(c, v)
		}
	}()
	return c.checker.Check(r, r.target)
}

// probePanicked makes the result of c's check that panicked with v, and
// logs it unless it logged one of c's less than panicLogEvery ago. It runs
// in probe's deferred function, where the stack is still the panic's.
func (m *Manager) probePanicked(c *check, v any) error {
	err := &probePanic{typ: c.hc.Type, value: outsideText(fmt.Sprint(v))}
	now := m.opts.Clock.Now()
	m.mu.Lock()
	logIt := c.panicLogged.IsZero() || now.Sub(c.panicLogged) >= panicLogEvery
	unlogged := c.panicsUnlogged
	if logIt {
		c.panicLogged, c.panicsUnlogged = now, 0
	} else {
		c.panicsUnlogged++
	}
	m.mu.Unlock()
	if logIt {
		m.opts.Logger.Error("health check panicked", "target", c.id.target, "check", c.hc.Type,
			"panic", err.value, "unlogged_since_last", unlogged, "stack", string(debug.Stack()))
	}
	return err
}
