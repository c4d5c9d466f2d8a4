package ha

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/internal/sandbox"
)

// Defaults of NotifyOptions.
const (
	DefaultNotifyTimeout    = 30 * time.Second
	DefaultNotifyMaxRunning = 4
	DefaultNotifyMaxQueued  = 8
	DefaultNotifyUser       = "nobody"
)

// NotifyOptions configure a Notifier; zero values take the defaults.
type NotifyOptions struct {
	// Timeout bounds each program's run; past it its process group is
	// killed.
	Timeout time.Duration
	// MaxRunning is how many programs run at once, all instances and
	// groups together.
	MaxRunning int
	// MaxQueued is how many notifications of one instance (or group) wait
	// behind the one being run; past it the oldest waiting is dropped.
	MaxQueued int
	// User is who the programs run as when lbd is root.
	User string
	// Run runs a program (sandbox.Run when nil; tests replace it).
	Run func(context.Context, sandbox.Command) error
}

// Notifier runs the configuration's notify programs (keepalived's notify,
// notify_master, notify_backup, notify_fault, notify_stop) on the VRRP
// transitions it is handed by Event.
//
// For each transition of an instance to MASTER, BACKUP, FAULT or STOP (lbd
// stopping the instance), the state's own program runs without arguments,
// then the notify program with TYPE NAME STATE PRIORITY ("INSTANCE", the
// instance's name, the state, its configured priority), as keepalived's
// send_instance_notifies does. Init is never notified (nor by keepalived).
// A sync group is notified ("GROUP", its name, the state, priority "0" as
// keepalived sends for a group) when all its members have reached the same
// state, once per change of that common state.
//
// Programs never run with a shell, and run in internal/sandbox's sandbox:
// as User ("nobody") when lbd is root, with only PATH in their environment.
// keepalived runs them as root (or keepalived_script); lbd does not, so
// that a writable script or a compromised one is not root on the
// balancer: a program that needs root must ask for it narrowly, through
// sudo with a rule for that one command, or by starting a systemd unit.
//
// Event never waits for a program. One instance's (or group's)
// notifications run one after the other, in the order of the transitions,
// so that a script sees MASTER then BACKUP as they happened (keepalived
// forks them all at once, and only its notify FIFO keeps the order); at
// most MaxRunning programs run at once, each for at most Timeout. While a
// program hangs, at most MaxQueued notifications of the same instance wait
// behind it; past that the oldest waiting one is dropped (and logged), so
// that the latest state is always notified and memory stays bounded. There
// is at most one goroutine per instance and group, and one per running
// program.
type Notifier struct {
	log  *slog.Logger
	opts NotifyOptions
	cred *syscall.Credential // nil: lbd's own user

	instances map[string]config.Notify
	groups    map[string]*notifyGroup

	sem    chan struct{} // a slot per running program
	ctx    context.Context
	cancel context.CancelFunc // kills what runs and drops what waits
	wg     sync.WaitGroup

	mu     sync.Mutex // guards queues, closed, the groups' states
	queues map[string][]notification
	closed bool
}

// notifyGroup is a sync group as the Notifier follows it.
type notifyGroup struct {
	notify  config.Notify
	members map[string]string // notified state by member; "" before any
	state   string            // the group's last notified state
}

// notification is one transition to notify: the programs to run, in
// order, each with its arguments.
type notification struct {
	typ, name, state string
	runs             []sandbox.Command
}

// NewNotifier returns a Notifier for cfg's instances and groups. It fails
// only when a program is configured and User cannot be looked up.
func NewNotifier(cfg *config.Config, log *slog.Logger, opts NotifyOptions) (*Notifier, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.withDefaults()
	n := &Notifier{
		log: log, opts: opts,
		instances: map[string]config.Notify{}, groups: map[string]*notifyGroup{},
		sem: make(chan struct{}, opts.MaxRunning), queues: map[string][]notification{},
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	programs := false
	for _, v := range cfg.VRRP {
		n.instances[v.Name] = v.Notify
		programs = programs || v.Notify != config.Notify{}
	}
	for _, g := range cfg.VRRPSyncGroups {
		ng := &notifyGroup{notify: g.Notify, members: map[string]string{}}
		for _, m := range g.Instances {
			ng.members[m] = ""
		}
		n.groups[g.Name] = ng
		programs = programs || g.Notify != config.Notify{}
	}
	if programs {
		var err error
		if n.cred, err = sandbox.Credential(opts.User); err != nil {
			n.cancel()
			return nil, fmt.Errorf("VRRP notify programs: %w", err)
		}
	}
	return n, nil
}

func (o NotifyOptions) withDefaults() NotifyOptions {
	if o.Timeout <= 0 {
		o.Timeout = DefaultNotifyTimeout
	}
	if o.MaxRunning <= 0 {
		o.MaxRunning = DefaultNotifyMaxRunning
	}
	if o.MaxQueued <= 0 {
		o.MaxQueued = DefaultNotifyMaxQueued
	}
	o.User = cmp.Or(o.User, DefaultNotifyUser)
	if o.Run == nil {
		o.Run = sandbox.Run
	}
	return o
}

// notifyState is the STATE argument for a transition; "" for none.
func notifyState(t vrrp.Transition) string {
	switch {
	case t.To == vrrp.Init && t.Cause == vrrp.CauseStop:
		return "STOP"
	case t.To == vrrp.Init:
		return ""
	}
	return t.To.String() // MASTER, BACKUP, FAULT
}

// Event queues the programs for e (ha.Options.OnEvent). It never blocks on
// a program; after Close it does nothing.
func (n *Notifier) Event(e vrrp.Event) {
	state := notifyState(e.Transition)
	if state == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.log.Debug("VRRP transition after the notifier closed; not notified", "instance", e.Instance, "state", state)
		return
	}
	if prog, ok := n.instances[e.Instance]; ok {
		n.enqueue("INSTANCE", e.Instance, state, strconv.Itoa(int(e.Priority)), prog)
	}
	g := n.groups[e.Group]
	if g == nil {
		return
	}
	if _, ok := g.members[e.Instance]; !ok {
		return
	}
	g.members[e.Instance] = state
	for _, s := range g.members {
		if s != state {
			return
		}
	}
	if g.state != state {
		g.state = state
		// keepalived passes 0 as a group's priority.
		n.enqueue("GROUP", e.Group, state, "0", g.notify)
	}
}

// enqueue adds a notification to its queue, and starts the queue's
// worker if none runs. n.mu is held.
func (n *Notifier) enqueue(typ, name, state, prio string, prog config.Notify) {
	nt := notification{typ: typ, name: name, state: state}
	own := map[string]string{"MASTER": prog.Master, "BACKUP": prog.Backup, "FAULT": prog.Fault, "STOP": prog.Stop}[state]
	// keepalived's order: the state's own program, then notify.
	if own != "" {
		nt.runs = append(nt.runs, sandbox.Command{Path: own})
	}
	if prog.Any != "" {
		nt.runs = append(nt.runs, sandbox.Command{Path: prog.Any, Args: []string{typ, name, state, prio}})
	}
	if len(nt.runs) == 0 {
		return
	}
	key := typ + " " + name
	q, running := n.queues[key]
	if !running {
		n.queues[key] = nil // runs, nothing waits
		n.wg.Go(func() { n.work(key, nt) })
		return
	}
	if len(q) == n.opts.MaxQueued {
		n.log.Warn("VRRP notify programs still running; the oldest waiting notification is dropped",
			"type", typ, "name", name, "dropped_state", q[0].state, "waiting", len(q))
		q = q[1:]
	}
	n.queues[key] = append(q, nt)
}

// work runs nt, then key's waiting notifications until none waits.
func (n *Notifier) work(key string, nt notification) {
	for {
		for _, c := range nt.runs {
			n.run(nt, c)
		}
		n.mu.Lock()
		q := n.queues[key]
		if len(q) == 0 || n.ctx.Err() != nil {
			if len(q) > 0 {
				n.log.Warn("VRRP notifications dropped at shutdown", "queue", key, "dropped", len(q))
			}
			delete(n.queues, key)
			n.mu.Unlock()
			return
		}
		nt = q[0]
		n.queues[key] = q[1:]
		n.mu.Unlock()
	}
}

// run runs one program of nt, waiting for a slot first.
func (n *Notifier) run(nt notification, c sandbox.Command) {
	select {
	case n.sem <- struct{}{}:
	case <-n.ctx.Done():
		return
	}
	defer func() { <-n.sem }()
	if n.ctx.Err() != nil {
		return // Close gave up while this waited for a slot
	}
	c.Cred, c.Timeout = n.cred, n.opts.Timeout
	start := time.Now()
	err := n.opts.Run(n.ctx, c)
	attrs := []any{"program", c.Path, "type", nt.typ, "name", nt.name, "state", nt.state, "duration", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		n.log.Warn("VRRP notify program failed", append(attrs, "error", err)...)
		return
	}
	n.log.Debug("VRRP notify program ran", attrs...)
}

// Close stops taking events and waits for the programs queued so far to
// run (a STOP notification is queued when Pair.Run returns). When ctx ends
// first, the programs running are killed and those waiting are dropped,
// and Close returns an error saying so.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	done := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		n.cancel()
		return nil
	case <-ctx.Done():
		n.cancel()
		<-done
		return fmt.Errorf("VRRP notify programs killed or dropped at shutdown: %w", ctx.Err())
	}
}
