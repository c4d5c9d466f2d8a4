package vrrp

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// wire is an in-memory link: what one conn sends reaches the others
// (multicast) or the one whose source is the destination (unicast),
// unless the wire is cut.
type wire struct {
	mu    sync.Mutex
	conns []*wireConn
	cut   bool
	// drop, when set, loses the adverts it returns true for.
	drop func(src netip.Addr, a Advert) bool
}

type wireConn struct {
	w      *wire
	src    netip.Addr
	in     chan Packet
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	heard  int // adverts above priority 0 read
}

func (w *wire) attach(src netip.Addr) *wireConn {
	c := &wireConn{w: w, src: src, in: make(chan Packet, 256), closed: make(chan struct{})}
	w.mu.Lock()
	w.conns = append(w.conns, c)
	w.mu.Unlock()
	return c
}

func (w *wire) setCut(cut bool) {
	w.mu.Lock()
	w.cut = cut
	w.mu.Unlock()
}

func (w *wire) setDrop(drop func(src netip.Addr, a Advert) bool) {
	w.mu.Lock()
	w.drop = drop
	w.mu.Unlock()
}

// heardMasters is how many adverts above priority 0 c has read.
func (c *wireConn) heardMasters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.heard
}

func (c *wireConn) Receive() (Packet, error) {
	select {
	case p := <-c.in:
		if p.Advert.Priority > 0 {
			c.mu.Lock()
			c.heard++
			c.mu.Unlock()
		}
		return p, nil
	case <-c.closed:
		return Packet{}, errors.New("closed")
	}
}

func (c *wireConn) SendFrom(a Advert, _, dst netip.Addr) error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.cut || c.w.drop != nil && c.w.drop(c.src, a) {
		return nil // lost on the wire
	}
	for _, o := range c.w.conns {
		if o != c && (dst.IsMulticast() || dst == o.src) {
			select {
			case o.in <- Packet{Src: c.src, Advert: a}:
			default:
			}
		}
	}
	return nil
}

func (c *wireConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// box is one Runner on the wire, recording its events (with how many
// adverts above priority 0 it had read by then) and re-announcements.
type box struct {
	r         *Runner
	conn      *wireConn
	cancel    context.CancelFunc
	done      chan error
	mu        sync.Mutex
	events    []Event
	heardAt   []int
	holdings  []Event
	announces int
}

func startBox(t *testing.T, w *wire, src netip.Addr, prio uint8, mod ...func(*Params)) *box {
	t.Helper()
	p := params(append([]func(*Params){func(p *Params) {
		p.Self, p.Priority, p.Interval = src, prio, 20*time.Millisecond
	}}, mod...)...)
	conn := w.attach(src)
	b := &box{done: make(chan error, 1), conn: conn}
	r, err := New(Options{
		Groups: []GroupSpec{{Instances: []InstanceSpec{{Name: "outside", Link: Link{"eth0", 4}, Params: p}}}},
		Dial:   func(Link) (Conn, error) { return conn, nil },
		OnEvent: func(e Event) {
			b.mu.Lock()
			b.events = append(b.events, e)
			b.heardAt = append(b.heardAt, conn.heardMasters())
			b.mu.Unlock()
		},
		OnHolding: func(e Event) {
			b.mu.Lock()
			b.holdings = append(b.holdings, e)
			b.mu.Unlock()
		},
		OnAnnounce: func(string) {
			b.mu.Lock()
			b.announces++
			b.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	b.r = r
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() { b.done <- r.Run(ctx) }()
	t.Cleanup(b.stop)
	return b
}

func (b *box) stop() {
	if b.cancel == nil {
		return
	}
	b.cancel()
	<-b.done
	b.cancel = nil
}

func (b *box) state() State { return b.r.Status()[0].State }

// waitStates polls until the boxes are in want, and none holds addresses
// it left master for, with a generous limit: the timings here are the
// machines', not asserted.
func waitStates(t *testing.T, what string, boxes []*box, want ...State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for i, b := range boxes {
			st := b.r.Status()[0]
			ok = ok && st.State == want[i] && !st.Holding
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var got []State
			for _, b := range boxes {
				got = append(got, b.state())
			}
			t.Fatalf("%s: states %v, want %v", what, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunnerPair(t *testing.T) {
	w := &wire{}
	a := startBox(t, w, peer, 150)
	b := startBox(t, w, self, 100)
	boxes := []*box{a, b}
	waitStates(t, "start", boxes, Master, Backup)
	// A backup is BACKUP from its start, before it has heard anyone:
	// wait for the master's first advert to arrive.
	deadline := time.Now().Add(10 * time.Second)
	for st := b.r.Status()[0]; st.Master != peer || st.MasterPriority != 150 || st.Received == 0; st = b.r.Status()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("backup's status %+v: want master %v at 150 heard", st, peer)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Partition: both masters. Heal: the higher priority keeps it.
	w.setCut(true)
	waitStates(t, "partition", boxes, Master, Master)
	w.setCut(false)
	waitStates(t, "heal", boxes, Master, Backup)

	// A planned stop: priority 0, and the backup takes over.
	a.stop()
	if st := a.r.Status()[0]; st.State != Init {
		t.Errorf("stopped box in %v, want INIT", st.State)
	}
	waitStates(t, "after the master stopped", []*box{b}, Master)
	b.mu.Lock()
	last := b.events[len(b.events)-1]
	b.mu.Unlock()
	if last.To != Master || last.Cause != CauseMasterStopped {
		t.Errorf("backup's last event %+v, want MASTER because the master stopped (after the skew time only)", last)
	}
	// Make before break: the stopping master gave up only after the
	// peer had become master.
	a.mu.Lock()
	released := a.events[len(a.events)-1]
	a.mu.Unlock()
	if released.To != Init || released.At.Before(last.At) {
		t.Errorf("the stopping master's last event %+v came before the peer's takeover at %v", released, last.At)
	}
}

// Adverts that do not match the instance are counted and change nothing.
func TestRunnerRefuses(t *testing.T) {
	w := &wire{}
	a := startBox(t, w, peer, 150, func(p *Params) { p.Addrs = []netip.Addr{low} })
	b := startBox(t, w, self, 100)
	// Each refuses the other's adverts (another address list): both master.
	waitStates(t, "mismatched addresses", []*box{a, b}, Master, Master)
	if n := b.r.Status()[0].Refused[RefusedAddrs]; n == 0 {
		t.Errorf("no refusal counted: %+v", b.r.Status()[0])
	}
}

// lastEvent returns the box's latest event and how many adverts above
// priority 0 it had read by then.
func (b *box) lastEvent() (Event, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.events) == 0 {
		return Event{}, 0
	}
	return b.events[len(b.events)-1], b.heardAt[len(b.heardAt)-1]
}

func (b *box) announced() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.announces
}

// waitFor polls cond with a generous limit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A preempted master is a backup at once in VRRP terms, but reports the
// transition (the daemon gives the addresses up) only once it has read
// the new master's second advert; then it sends priority 0.
func TestRunnerPreemptedMakeBeforeBreak(t *testing.T) {
	w := &wire{}
	old := startBox(t, w, self, 100)
	waitStates(t, "alone", []*box{old}, Master)
	heardBefore := old.conn.heardMasters()
	preempting := startBox(t, w, peer, 150, func(p *Params) { p.Preempt = true })
	waitStates(t, "preemption", []*box{preempting, old}, Master, Backup)
	waitFor(t, "BACKUP event on the preempted box", func() bool { e, _ := old.lastEvent(); return e.To == Backup })

	released, heard := old.lastEvent()
	if released.From != Master || released.Cause != CauseHigherPeer {
		t.Errorf("preempted box's event %+v, want MASTER -> BACKUP for a higher peer", released)
	}
	if n := heard - heardBefore; n < 2 {
		t.Errorf("the preempted box gave its addresses up after %d of the new master's adverts, want 2", n)
	}
	took, _ := preempting.lastEvent()
	if took.To != Master || released.At.Before(took.At) {
		t.Errorf("the preempted box's release at %v came before the new master's %+v", released.At, took)
	}
	if st := old.r.Status()[0]; st.Holding || st.State != Backup {
		t.Errorf("preempted box's status %+v, want BACKUP, not holding", st)
	}
	old.checkHolding(t, released)
	waitFor(t, "the new master to hear the release (priority 0)", func() bool { return preempting.r.Status()[0].Received > 0 })
}

// checkHolding: the box reported stepping down once, before its release.
func (b *box) checkHolding(t *testing.T, released Event) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.holdings) != 1 || b.holdings[0].From != Master || b.holdings[0].At.After(released.At) {
		t.Errorf("holding events %+v, want one out of MASTER before the release at %v", b.holdings, released.At)
	}
}

// A tracked check failing on the master (a soft fault) is make-before-
// break too: FAULT at once in VRRP terms (priority 0, so the backup takes
// over after its skew time), the addresses given up after two of the new
// master's adverts.
func TestRunnerSoftFaultMakeBeforeBreak(t *testing.T) {
	w := &wire{}
	a := startBox(t, w, self, 150)
	waitStates(t, "alone", []*box{a}, Master)
	b := startBox(t, w, peer, 100)
	waitStates(t, "pair", []*box{a, b}, Master, Backup)
	heardBefore := a.conn.heardMasters()
	a.r.SetFault(context.Background(), "outside", SoftFault)
	waitStates(t, "the soft fault", []*box{a, b}, Fault, Master)
	waitFor(t, "FAULT event on the old master", func() bool { e, _ := a.lastEvent(); return e.To == Fault })
	released, heard := a.lastEvent()
	if released.From != Master || released.Cause != CauseTracked {
		t.Errorf("old master's event %+v, want MASTER -> FAULT for a tracked check", released)
	}
	if n := heard - heardBefore; n < 2 {
		t.Errorf("the old master gave its addresses up after %d of the new master's adverts, want 2", n)
	}
	a.checkHolding(t, released)
	if st := a.r.Status()[0]; st.Holding {
		t.Errorf("old master's status %+v, want not holding after the release", st)
	}
}

// A one-sided heal: the loser hears the winner first and steps down, so
// the winner never hears it as master (its adverts above priority 0 are
// lost). The loser's priority 0 at its release still makes the winner
// announce the addresses again, for neighbours that learned the loser.
func TestRunnerOneSidedHeal(t *testing.T) {
	w := &wire{}
	winner := startBox(t, w, peer, 150)
	loser := startBox(t, w, self, 100)
	boxes := []*box{winner, loser}
	waitStates(t, "start", boxes, Master, Backup)
	w.setCut(true)
	waitStates(t, "partition", boxes, Master, Master)
	transitions := winner.r.Status()[0].Transitions
	w.setDrop(func(src netip.Addr, a Advert) bool { return src == self && a.Priority > 0 })
	before := winner.announced()
	w.setCut(false)
	waitStates(t, "heal", boxes, Master, Backup)
	waitFor(t, "the loser's BACKUP event", func() bool { e, _ := loser.lastEvent(); return e.To == Backup })
	waitFor(t, "the winner's re-announcement", func() bool { return winner.announced() > before })
	if st := winner.r.Status()[0]; st.State != Master || st.Transitions != transitions {
		t.Errorf("winner's status %+v, want MASTER throughout", st)
	}
}
