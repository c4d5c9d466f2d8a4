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
}

type wireConn struct {
	w      *wire
	src    netip.Addr
	in     chan Packet
	closed chan struct{}
	once   sync.Once
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

func (c *wireConn) Receive() (Packet, error) {
	select {
	case p := <-c.in:
		return p, nil
	case <-c.closed:
		return Packet{}, errors.New("closed")
	}
}

func (c *wireConn) SendFrom(a Advert, _, dst netip.Addr) error {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	if c.w.cut {
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

// box is one Runner on the wire, recording its events.
type box struct {
	r      *Runner
	cancel context.CancelFunc
	done   chan error
	mu     sync.Mutex
	events []Event
}

func startBox(t *testing.T, w *wire, src netip.Addr, prio uint8, mod ...func(*Params)) *box {
	t.Helper()
	p := params(append([]func(*Params){func(p *Params) {
		p.Self, p.Priority, p.Interval = src, prio, 20*time.Millisecond
	}}, mod...)...)
	b := &box{done: make(chan error, 1)}
	conn := w.attach(src)
	r, err := New(Options{
		Groups: []GroupSpec{{Instances: []InstanceSpec{{Name: "outside", Link: Link{"eth0", 4}, Params: p}}}},
		Dial:   func(Link) (Conn, error) { return conn, nil },
		OnEvent: func(e Event) {
			b.mu.Lock()
			b.events = append(b.events, e)
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

// waitStates polls until the boxes are in want, with a generous limit:
// the timings here are the machines', not asserted.
func waitStates(t *testing.T, what string, boxes []*box, want ...State) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := true
		for i, b := range boxes {
			ok = ok && b.state() == want[i]
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
	if st := b.r.Status()[0]; st.Master != peer || st.MasterPriority != 150 || st.Received == 0 {
		t.Errorf("backup's status %+v: want master %v at 150 heard", st, peer)
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
