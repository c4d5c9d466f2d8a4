package announce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// link answers ARP on one interface. Run's goroutine creates it, hands it
// VIPs with set and stops it with cancel; the worker goroutine (run) owns
// the socket and the gratuitous ARP schedule.
type link struct {
	name       string
	log        *slog.Logger
	gratuitous []time.Duration
	recheck    time.Duration
	cancel     context.CancelFunc
	done       chan struct{} // closed when run has returned

	// vips is read by the socket's reader for every request, so a removed
	// VIP stops being answered as soon as set returns.
	vips    atomic.Pointer[vipSet]
	changed chan struct{} // one slot: vips changed since the worker looked

	mu    sync.Mutex
	mac   net.HardwareAddr
	state State
	err   error
}

func newLink(name string, log *slog.Logger, gratuitous []time.Duration, recheck time.Duration, cancel context.CancelFunc) *link {
	l := &link{
		name:       name,
		log:        log,
		gratuitous: gratuitous,
		recheck:    recheck,
		cancel:     cancel,
		done:       make(chan struct{}),
		changed:    make(chan struct{}, 1),
		err:        errors.New("not looked up yet"),
	}
	l.vips.Store(&vipSet{})
	return l
}

// set replaces the VIPs (sorted, deduplicated) and wakes the worker.
func (l *link) set(vips []netip.Addr) {
	if slices.Equal(*l.vips.Load(), vips) {
		return
	}
	s := vipSet(slices.Clone(vips))
	l.vips.Store(&s)
	select {
	case l.changed <- struct{}{}:
	default:
	}
}

func (l *link) status() InterfaceStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return InterfaceStatus{
		Interface:    l.name,
		HardwareAddr: slices.Clone(l.mac),
		VIPs:         slices.Clone(*l.vips.Load()),
		State:        l.state,
		Err:          l.err,
	}
}

// setStatus records the state and logs transitions only, so that an
// interface that stays missing is reported once, not every Recheck.
func (l *link) setStatus(state State, mac net.HardwareAddr, err error) {
	l.mu.Lock()
	same := l.state == state && bytes.Equal(l.mac, mac) && errText(l.err) == errText(err)
	l.state, l.mac, l.err = state, mac, err
	l.mu.Unlock()
	if same {
		return
	}
	switch state {
	case Answering:
		l.log.Info("answering ARP", "mac", mac.String())
	case Down:
		// Info, not Warn: an interface just set up has no carrier for a
		// moment, and lbd has nothing to fix.
		l.log.Info("interface is down or has no carrier; gratuitous ARP waits until it is up", "mac", mac.String())
	case Failed:
		l.log.Warn("cannot answer ARP; retrying", "every", l.recheck, "err", err)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// worker is the state of one link's goroutine; only run touches it.
type worker struct {
	*link
	sock *socket
	up   bool   // the interface was up with carrier at the last look
	last vipSet // VIPs at the last sync, to log what changed
	// announced holds the VIPs whose gratuitous ARP has been scheduled on
	// this socket since the interface was last seen up; nothing is sent
	// again for them until the socket is reopened or the link flaps.
	announced map[netip.Addr]bool
	pending   []announcement
}

// announcement is one VIP's gratuitous ARP schedule.
type announcement struct {
	vip   netip.Addr
	start time.Time
	next  int // index into link.gratuitous of the next round
}

// run looks the interface up, opens its socket and keeps both current
// until ctx ends; it closes the socket before returning.
func (l *link) run(ctx context.Context) {
	defer close(l.done)
	w := &worker{link: l}
	defer w.closeSocket()

	recheck := time.NewTicker(l.recheck)
	defer recheck.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()

	w.refresh()
	for {
		if next, ok := w.nextDue(); ok {
			due.Reset(time.Until(next))
		} else {
			due.Stop()
		}
		var sockDown, sockDone <-chan struct{}
		if w.sock != nil {
			sockDown, sockDone = w.sock.down, w.sock.done
		}
		select {
		case <-ctx.Done():
			if w.sock != nil {
				l.log.Info("no longer answering ARP")
			}
			return
		case <-l.changed:
			w.sync(time.Now())
		case <-recheck.C:
			w.refresh()
		case <-sockDown:
			// The interface went down or was deleted: look now rather than
			// at the next recheck.
			w.refresh()
		case <-sockDone:
			err := w.sock.err
			w.closeSocket()
			w.setStatus(Failed, nil, fmt.Errorf("reading ARP on %s: %w", l.name, err))
		case now := <-due.C:
			w.sendDue(now)
		}
	}
}

// refresh looks the interface up and (re)opens its socket as needed.
func (w *worker) refresh() {
	ifi, err := net.InterfaceByName(w.name)
	if err != nil {
		w.closeSocket()
		w.setStatus(Failed, nil, fmt.Errorf("looking up interface %s: %w", w.name, err))
		return
	}
	if len(ifi.HardwareAddr) != 6 {
		w.closeSocket()
		w.setStatus(Failed, nil, fmt.Errorf("interface %s has no Ethernet address (%q), and ARP needs one", w.name, ifi.HardwareAddr.String()))
		return
	}
	if w.sock != nil && (w.sock.index != ifi.Index || !bytes.Equal(w.sock.mac, ifi.HardwareAddr)) {
		// Re-created (new index) or given a new MAC: the socket is bound to
		// the old device or replies would carry the old MAC.
		w.log.Info("interface changed; reopening its ARP socket", "index", ifi.Index, "mac", ifi.HardwareAddr.String())
		w.closeSocket()
	}
	if w.sock == nil {
		s, err := openSocket(ifi, w.log, func() vipSet { return *w.vips.Load() })
		if err != nil {
			w.setStatus(Failed, nil, err)
			return
		}
		w.sock = s
	}
	up := ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0
	if !up {
		// Announce everything again when it comes back: neighbours and
		// switches may have forgotten the VIPs meanwhile.
		w.announced, w.pending = nil, nil
		w.setStatus(Down, ifi.HardwareAddr, fmt.Errorf("interface %s is down or has no carrier", w.name))
	} else {
		w.setStatus(Answering, ifi.HardwareAddr, nil)
	}
	w.up = up
	w.sync(time.Now())
}

// sync schedules gratuitous ARP for VIPs not yet announced on the current
// socket, forgets removed ones, and sends what is due now.
func (w *worker) sync(now time.Time) {
	vips := *w.vips.Load()
	for _, v := range vips {
		if !w.last.has(v) {
			w.log.Info("announcing VIP", "vip", v)
		}
	}
	for _, v := range w.last {
		if !vips.has(v) {
			w.log.Info("no longer announcing VIP", "vip", v)
		}
	}
	w.last = vips

	for v := range w.announced {
		if !vips.has(v) {
			delete(w.announced, v) // announce it again if it comes back
		}
	}
	w.pending = slices.DeleteFunc(w.pending, func(a announcement) bool { return !vips.has(a.vip) })
	if w.sock == nil || !w.up {
		return
	}
	if w.announced == nil {
		w.announced = map[netip.Addr]bool{}
	}
	for _, v := range vips {
		if !w.announced[v] {
			w.announced[v] = true
			w.pending = append(w.pending, announcement{vip: v, start: now})
		}
	}
	w.sendDue(now)
}

// sendDue sends one round of gratuitous ARP for each VIP whose next round
// is due. Rounds missed while the worker was busy collapse into one.
func (w *worker) sendDue(now time.Time) {
	for i := range w.pending {
		a := &w.pending[i]
		due := false
		for a.next < len(w.gratuitous) && !a.start.Add(w.gratuitous[a.next]).After(now) {
			a.next++
			due = true
		}
		if due && w.sock != nil {
			if err := w.sock.sendGratuitous(a.vip); err != nil {
				w.log.Warn("sending gratuitous ARP", "vip", a.vip, "err", err)
			} else {
				w.log.Debug("sent gratuitous ARP", "vip", a.vip, "round", a.next)
			}
		}
	}
	w.pending = slices.DeleteFunc(w.pending, func(a announcement) bool { return a.next >= len(w.gratuitous) })
}

func (w *worker) nextDue() (time.Time, bool) {
	var next time.Time
	for _, a := range w.pending {
		if t := a.start.Add(w.gratuitous[a.next]); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next, !next.IsZero()
}

func (w *worker) closeSocket() {
	if w.sock == nil {
		return
	}
	w.sock.close()
	w.sock, w.up, w.announced, w.pending = nil, false, nil, nil
}
