package vrrp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sync"
	"time"
)

// Packet is one received VRRP packet: an advert, or why it was refused
// before it could be read (a bad checksum, a TTL other than 255).
type Packet struct {
	Src    netip.Addr
	Advert Advert
	// Err is set when the packet was refused; Reason names the refusal
	// for counting ("checksum", "ttl", ...).
	Err    error
	Reason string
}

// Conn is the VRRP socket of one interface and family.
type Conn interface {
	// Receive blocks for the next packet; it fails once the Conn is
	// closed.
	Receive() (Packet, error)
	// SendFrom sends a from src (the instance's address on the link) to
	// dst (the multicast group or a unicast peer).
	SendFrom(a Advert, src, dst netip.Addr) error
	Close() error
}

// Link names a Conn: an interface and an address family (4 or 6).
type Link struct {
	Interface string
	Family    int
}

// InstanceSpec is one instance the Runner runs.
type InstanceSpec struct {
	Name string
	Link Link
	// Params must have Self set: the address this box's adverts come from
	// on the link.
	Params Params
}

// GroupSpec is a sync group of instances (Name "" for an instance of its
// own).
type GroupSpec struct {
	Name      string
	Instances []InstanceSpec
}

// Event is a transition of one instance.
type Event struct {
	Instance, Group string
	Transition
	Priority uint8
	At       time.Time
}

// Options configure a Runner.
type Options struct {
	Groups []GroupSpec
	// Dial opens the Conn of a link.
	Dial func(Link) (Conn, error)
	// OnEvent is called, from the Runner's goroutine, on every transition
	// and re-announcement, in order; it must not block for long.
	OnEvent func(Event)
	// OnHolding is called, like OnEvent, when an instance leaves master
	// in VRRP terms but keeps its addresses until the new master has
	// taken over (see Group): the moment to hand state over to the peer.
	// The transition itself comes to OnEvent at the release.
	OnHolding func(Event)
	// OnAnnounce asks for the instance's addresses to be announced again
	// (gratuitous ARP, unsolicited neighbour advertisements).
	OnAnnounce func(instance string)
	Logger     *slog.Logger
	Now        func() time.Time // time.Now when nil
}

// instance is the Runner's view of one instance.
type instance struct {
	spec   InstanceSpec
	group  *Group
	member int
	conn   Conn
	stats  Stats
	since  time.Time
	// failing: the latest send failed (its error was logged).
	failing bool
	// holding: left master in VRRP terms, the addresses still held.
	holding bool
}

// Runner runs VRRP instances: it reads adverts, keeps the timers, sends
// adverts and reports transitions. One goroutine owns all state machines.
type Runner struct {
	opts      Options
	groups    []*Group
	instances []*instance
	conns     map[Link]Conn
	packets   chan received
	faults    chan faultChange

	mu     sync.Mutex // guards status
	status []Status
}

type received struct {
	link Link
	pkt  Packet
}

type faultChange struct {
	instance string
	kind     FaultKind
}

// New checks the specs and returns a Runner; Run starts it.
func New(opts Options) (*Runner, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Runner{opts: opts, conns: map[Link]Conn{}, packets: make(chan received, 64), faults: make(chan faultChange, 16)}
	seen := map[string]bool{}
	for _, gs := range opts.Groups {
		var ms []*Machine
		for _, is := range gs.Instances {
			if seen[is.Name] {
				return nil, fmt.Errorf("VRRP instance %q given twice", is.Name)
			}
			seen[is.Name] = true
			if !is.Params.Self.IsValid() {
				return nil, fmt.Errorf("VRRP instance %q: no source address on %s", is.Name, is.Link.Interface)
			}
			ms = append(ms, NewMachine(is.Params))
		}
		g := NewGroup(gs.Name, ms...)
		r.groups = append(r.groups, g)
		for i, is := range gs.Instances {
			r.instances = append(r.instances, &instance{spec: is, group: g, member: i})
		}
	}
	r.publish()
	return r, nil
}

// Stats count an instance's adverts.
type Stats struct {
	Sent, Received uint64
	SendErrors     uint64
	// Refused counts adverts for the instance's VRID that it did not take,
	// by reason.
	Refused     map[Refusal]uint64
	Transitions uint64
}

// Status is one instance as Status reports it.
type Status struct {
	Name, Group string
	Link        Link
	VRID        uint8
	Version     int
	Priority    uint8
	State       State
	// Holding: a backup in VRRP terms that still holds its addresses
	// until the new master has advertised twice (make-before-break).
	Holding bool
	Since   time.Time
	// Master is the master last heard (this box when master); invalid
	// when none.
	Master         netip.Addr
	MasterPriority uint8
	Stats
}

// Status returns every instance's state, in configuration order.
func (r *Runner) Status() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	// publish stores fresh copies and never touches them again.
	return r.status
}

// SetFault tells an instance how it is faulty (NoFault when it is not).
// It blocks until the Runner takes it, or ctx ends.
func (r *Runner) SetFault(ctx context.Context, instance string, k FaultKind) {
	select {
	case r.faults <- faultChange{instance, k}:
	case <-ctx.Done():
	}
}

// Run runs the instances until ctx ends, then stops them: masters hand
// over (see handOver) and report their transition to Init before Run
// returns.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.dial(); err != nil {
		return err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for link, c := range r.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.read(link, c, done)
		}()
	}
	defer func() {
		close(done)
		for _, c := range r.conns {
			c.Close()
		}
		wg.Wait()
	}()
	now := r.opts.Now()
	for _, g := range r.groups {
		r.apply(g, g.Start(now))
	}
	r.publish()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		r.arm(timer)
		select {
		case <-ctx.Done():
			r.handOver()
			for _, g := range r.groups {
				r.apply(g, g.Stop())
			}
			r.publish()
			return nil
		case p := <-r.packets:
			r.onPacket(p)
		case f := <-r.faults:
			r.onFault(f)
		case <-timer.C:
			now := r.opts.Now()
			for _, g := range r.groups {
				if d := g.Deadline(); !d.IsZero() && !now.Before(d) {
					r.apply(g, g.Tick(now))
				}
			}
		}
		r.publish()
	}
}

func (r *Runner) dial() error {
	for _, in := range r.instances {
		c, ok := r.conns[in.spec.Link]
		if !ok {
			var err error
			if c, err = r.opts.Dial(in.spec.Link); err != nil {
				for _, c := range r.conns {
					c.Close()
				}
				return fmt.Errorf("VRRP instance %s: %w", in.spec.Name, err)
			}
			r.conns[in.spec.Link] = c
		}
		in.conn = c
	}
	return nil
}

// arm sets timer to the earliest deadline of any group.
func (r *Runner) arm(timer *time.Timer) {
	var next time.Time
	for _, g := range r.groups {
		if d := g.Deadline(); !d.IsZero() && (next.IsZero() || d.Before(next)) {
			next = d
		}
	}
	wait := time.Hour
	if !next.IsZero() {
		wait = max(next.Sub(r.opts.Now()), 0)
	}
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(wait)
}

func (r *Runner) read(link Link, c Conn, done <-chan struct{}) {
	for {
		p, err := c.Receive()
		if err != nil {
			select {
			case <-done:
			default:
				r.opts.Logger.Error("VRRP socket failed; no more adverts are read on it", "interface", link.Interface, "family", link.Family, "error", err)
			}
			return
		}
		select {
		case r.packets <- received{link, p}:
		case <-done:
			return
		}
	}
}

func (r *Runner) onPacket(p received) {
	if p.pkt.Err != nil {
		r.opts.Logger.Debug("VRRP packet refused", "interface", p.link.Interface, "from", p.pkt.Src, "reason", p.pkt.Reason, "error", p.pkt.Err)
		return
	}
	now := r.opts.Now()
	for _, in := range r.instances {
		if in.spec.Link != p.link || in.spec.Params.VRID != p.pkt.Advert.VRID {
			continue
		}
		m := in.group.Members()[in.member]
		if why := m.Check(p.pkt.Src, p.pkt.Advert); why != Taken {
			r.refuse(in, why, p.pkt.Src)
			continue
		}
		in.stats.Received++
		r.apply(in.group, in.group.Receive(now, in.member, p.pkt.Src, p.pkt.Advert))
	}
}

func (r *Runner) refuse(in *instance, why Refusal, src netip.Addr) {
	if in.stats.Refused == nil {
		in.stats.Refused = map[Refusal]uint64{}
	}
	in.stats.Refused[why]++
	if why == RefusedSelf {
		return
	}
	// One warning per reason and instance: a misconfigured peer sends
	// several adverts a second.
	if in.stats.Refused[why] == 1 {
		r.opts.Logger.Warn("VRRP advert refused; further ones for the same reason are only counted",
			"instance", in.spec.Name, "from", src, "reason", why.String())
	}
}

func (r *Runner) onFault(f faultChange) {
	now := r.opts.Now()
	for _, in := range r.instances {
		if in.spec.Name == f.instance {
			r.apply(in.group, in.group.SetFault(now, in.member, f.kind))
		}
	}
}

// apply carries out a group's steps: adverts out, transitions reported.
// A transition out of master that keeps the addresses (Holding) is logged
// but reported as an Event only at its release: the daemon keeps serving,
// and notify programs see BACKUP once the addresses are given up, as
// keepalived's do.
func (r *Runner) apply(g *Group, steps []Step) {
	for _, st := range steps {
		in := r.member(g, st.Member)
		for _, a := range st.Send {
			r.send(in, a)
		}
		now := r.opts.Now()
		switch {
		case st.Holding != nil:
			in.stats.Transitions++
			first := !in.holding
			in.since, in.holding = now, true
			r.logTransition(in, g, *st.Holding, "addresses", "kept until the new master has advertised twice")
			if first && r.opts.OnHolding != nil {
				r.opts.OnHolding(r.event(in, g, *st.Holding, now))
			}
		case st.Kept != nil:
			in.stats.Transitions++
			in.since, in.holding = now, false
			r.logTransition(in, g, *st.Kept, "addresses", "still held: the new master went silent before they were given up")
		case st.Transition != nil && in.holding:
			in.holding = false
			r.opts.Logger.Info("VRRP: giving the addresses up", "instance", in.spec.Name, "group", g.Name,
				"after", now.Sub(in.since), "to", st.Transition.To.String())
			r.report(in, g, *st.Transition, now)
		case st.Transition != nil:
			in.stats.Transitions++
			in.since = now
			r.logTransition(in, g, *st.Transition)
			r.report(in, g, *st.Transition, now)
		}
		if st.Announce && r.opts.OnAnnounce != nil {
			r.opts.OnAnnounce(in.spec.Name)
		}
	}
}

func (r *Runner) logTransition(in *instance, g *Group, t Transition, more ...any) {
	r.opts.Logger.Info("VRRP transition", append([]any{"instance", in.spec.Name, "group", g.Name,
		"from", t.From.String(), "to", t.To.String(), "cause", t.Cause.String()}, more...)...)
}

func (r *Runner) report(in *instance, g *Group, t Transition, at time.Time) {
	if r.opts.OnEvent != nil {
		r.opts.OnEvent(r.event(in, g, t, at))
	}
}

func (r *Runner) event(in *instance, g *Group, t Transition, at time.Time) Event {
	return Event{Instance: in.spec.Name, Group: g.Name, Transition: t, Priority: in.spec.Params.Priority, At: at}
}

func (r *Runner) member(g *Group, i int) *instance {
	for _, in := range r.instances {
		if in.group == g && in.member == i {
			return in
		}
	}
	panic("vrrp: step for an unknown member")
}

func (r *Runner) send(in *instance, a Advert) {
	dsts := in.spec.Params.Peers
	if len(dsts) == 0 {
		dsts = []netip.Addr{Group4}
		if in.spec.Link.Family == 6 {
			dsts = []netip.Addr{Group6}
		}
	}
	for _, dst := range dsts {
		if err := in.conn.SendFrom(a, in.spec.Params.Self, dst); err != nil {
			in.stats.SendErrors++
			// Once per run of failures: a dead link fails every advert.
			if !in.failing {
				r.opts.Logger.Warn("VRRP advert not sent; further failures are only counted", "instance", in.spec.Name, "to", dst, "error", err)
			}
			in.failing = true
			continue
		}
		if in.failing && a.Priority > 0 && r.opts.OnAnnounce != nil {
			// The adverts could not leave (a local firewall, the link
			// gone): a peer may have become master and been learned by
			// the neighbours meanwhile.
			r.opts.OnAnnounce(in.spec.Name)
		}
		in.failing = false
		in.stats.Sent++
	}
}

// publish copies the instances' state for Status.
func (r *Runner) publish() {
	st := make([]Status, len(r.instances))
	for i, in := range r.instances {
		m := in.group.Members()[in.member]
		master, prio := m.MasterSeen()
		p := in.spec.Params
		st[i] = Status{Name: in.spec.Name, Group: in.group.Name, Link: in.spec.Link, VRID: p.VRID, Version: p.Version,
			Priority: p.Priority, State: m.State(), Holding: in.holding, Since: in.since, Master: master, MasterPriority: prio, Stats: in.stats}
		st[i].Refused = maps.Clone(in.stats.Refused)
	}
	r.mu.Lock()
	r.status = st
	r.mu.Unlock()
}

// handOver is a planned stop's make-before-break: each master sends
// priority 0 but keeps its addresses until the peer has advertised as
// master twice — its first advert goes out as it becomes master, before
// its addresses are bound; by the second, an advert interval later, they
// are — or for at most a master-down interval when no peer answers.
// Between the two, requests reach one box or the other, never neither.
// An instance already leaving master (see Group) waits for the rest of
// its new master's adverts the same way.
func (r *Runner) handOver() {
	const adverts = 2
	waiting := map[*instance]int{} // adverts still to hear
	var wait time.Duration
	for _, in := range r.instances {
		m := in.group.Members()[in.member]
		n, leaving := in.group.Leaving(in.member)
		switch {
		case m.State() == Master:
			waiting[in] = adverts
			r.send(in, m.advert(0))
		case leaving && n > 0:
			waiting[in] = n
		default:
			continue
		}
		wait = max(wait, m.MasterDownInterval()+m.Params().Interval)
	}
	if len(waiting) == 0 {
		return
	}
	start := r.opts.Now()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(waiting) > 0 {
		select {
		case <-timer.C:
			r.opts.Logger.Warn("VRRP: no peer took over within the master-down interval; giving the addresses up anyway", "waited", wait)
			return
		case p := <-r.packets:
			for in := range waiting {
				a := p.pkt.Advert
				if p.pkt.Err == nil && in.spec.Link == p.link && a.VRID == in.spec.Params.VRID && a.Priority > 0 &&
					in.group.Members()[in.member].Check(p.pkt.Src, a) == Taken {
					if waiting[in]--; waiting[in] == 0 {
						delete(waiting, in)
					}
				}
			}
		}
	}
	r.opts.Logger.Info("VRRP: the peer took over; giving the addresses up", "after", r.opts.Now().Sub(start))
}
