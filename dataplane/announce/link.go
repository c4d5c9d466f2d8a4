package announce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// link answers ARP and NDP on one interface. Run's goroutine creates it,
// hands it VIPs with set and stops it with cancel; the worker goroutine
// (run) owns the sockets and the gratuitous ARP (unsolicited neighbour
// advertisement) schedule.
type link struct {
	name       string
	log        *slog.Logger
	gratuitous []time.Duration
	recheck    time.Duration
	cancel     context.CancelFunc
	done       chan struct{} // closed when run has returned

	// vips is read by the sockets' readers for every request, so a removed
	// VIP stops being answered as soon as set returns.
	vips atomic.Pointer[vipSet]
	// standby are addresses the sockets stay open for (Standby).
	standby atomic.Pointer[vipSet]
	changed chan struct{} // one slot: vips or standby changed since the worker looked
	again   chan struct{} // one slot: announce every VIP once more (Again)
	// down has one slot: a socket's read returned ENETDOWN, which the
	// kernel reports once when the interface goes down or is deleted.
	down chan struct{}

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
		again:      make(chan struct{}, 1),
		down:       make(chan struct{}, 1),
		err:        errors.New("not looked up yet"),
	}
	l.vips.Store(&vipSet{})
	l.standby.Store(&vipSet{})
	return l
}

// set replaces the VIPs and the standby addresses (each sorted,
// deduplicated) and wakes the worker.
func (l *link) set(vips, standby []netip.Addr) {
	if slices.Equal(*l.vips.Load(), vips) && slices.Equal(*l.standby.Load(), standby) {
		return
	}
	s, sb := vipSet(slices.Clone(vips)), vipSet(slices.Clone(standby))
	l.vips.Store(&s)
	l.standby.Store(&sb)
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
		l.log.Info("answering ARP/NDP", "mac", mac.String())
	case Standby:
		l.log.Info("ARP/NDP sockets open for a takeover", "mac", mac.String())
	case Down:
		// Info, not Warn: an interface just set up has no carrier for a
		// moment, and lbd has nothing to fix.
		l.log.Info("interface is down or has no carrier; announcing waits until it is up", "mac", mac.String())
	case Failed:
		l.log.Warn("cannot answer ARP/NDP; retrying", "every", l.recheck, "err", err)
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
	// socks holds a socket per kind, open while the link has VIPs of
	// that kind and the interface exists.
	socks [numKinds]*socket
	up    bool   // the interface was up with carrier at the last look
	last  vipSet // VIPs at the last sync, to log what changed
	// announced holds the VIPs whose gratuitous ARP has been scheduled on
	// their socket since the interface was last seen up; nothing is sent
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

// run looks the interface up, opens its sockets and keeps them current
// until ctx ends; it closes the sockets before returning.
func (l *link) run(ctx context.Context) {
	defer close(l.done)
	w := &worker{link: l}
	defer w.closeSockets()

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
		select {
		case <-ctx.Done():
			if w.socks != [numKinds]*socket{} {
				l.log.Info("no longer answering ARP/NDP")
			}
			return
		case <-l.changed:
			// A takeover is on the clock: with the sockets open already
			// (standby), announce first, then look the interface up.
			if w.ready() {
				w.sync(time.Now())
			}
			// A new family of VIPs may need its socket.
			w.refresh()
		case <-recheck.C:
			w.refresh()
		case <-l.again:
			w.announced, w.pending = nil, nil
			w.sync(time.Now())
		case <-l.down:
			// The interface went down or was deleted: look now rather than
			// at the next recheck.
			w.refresh()
		case <-w.doneOf(arpKind):
			w.socketFailed(arpKind)
		case <-w.doneOf(ndpKind):
			w.socketFailed(ndpKind)
		case now := <-due.C:
			w.sendDue(now)
		}
	}
}

// ready reports whether the interface was up at the last look and every
// kind of the VIPs has its socket open.
func (w *worker) ready() bool {
	if !w.up {
		return false
	}
	for _, v := range *w.vips.Load() {
		if w.socks[kindOf(v)] == nil {
			return false
		}
	}
	return true
}

// doneOf is the done channel of k's socket, nil (never ready) if none.
func (w *worker) doneOf(k kind) <-chan struct{} {
	if w.socks[k] == nil {
		return nil
	}
	return w.socks[k].done
}

// socketFailed closes k's socket, whose reader returned an error; the
// next recheck opens it again.
func (w *worker) socketFailed(k kind) {
	s := w.socks[k]
	w.closeSocket(k)
	w.setStatus(Failed, s.mac, fmt.Errorf("reading %v on %s: %w", k, w.name, s.err))
}

// refresh looks the interface up, (re)opens the sockets the VIPs need,
// closes the others, and syncs the schedule.
func (w *worker) refresh() {
	ifi, err := net.InterfaceByName(w.name)
	if err != nil {
		w.closeSockets()
		w.setStatus(Failed, nil, fmt.Errorf("looking up interface %s: %w", w.name, err))
		return
	}
	if len(ifi.HardwareAddr) != 6 {
		w.closeSockets()
		w.setStatus(Failed, nil, fmt.Errorf("interface %s has no Ethernet address (%q), and ARP and NDP need one", w.name, ifi.HardwareAddr.String()))
		return
	}
	vips := *w.vips.Load()
	// The sockets serve the standby addresses too, answering none of them.
	open := vipSet(slices.Concat(vips, *w.standby.Load()))
	slices.SortFunc(open, netip.Addr.Compare)
	open = slices.Compact(open)
	var errs []error
	for k := range numKinds {
		if err := w.syncSocket(k, ifi, open); err != nil {
			errs = append(errs, err)
		}
	}
	up := ifi.Flags&net.FlagUp != 0 && ifi.Flags&net.FlagRunning != 0
	if !up {
		// Announce everything again when it comes back: neighbours and
		// switches may have forgotten the VIPs meanwhile.
		w.announced, w.pending = nil, nil
	}
	w.up = up
	switch {
	case len(errs) > 0:
		// The other kind's socket, if open, keeps answering.
		w.setStatus(Failed, ifi.HardwareAddr, errors.Join(errs...))
	case !up:
		w.setStatus(Down, ifi.HardwareAddr, fmt.Errorf("interface %s is down or has no carrier", w.name))
	case len(vips) == 0:
		w.setStatus(Standby, ifi.HardwareAddr, nil)
	default:
		w.setStatus(Answering, ifi.HardwareAddr, nil)
	}
	w.sync(time.Now())
}

// syncSocket makes k's socket match the addresses (VIPs and standby) and
// the interface: closed without addresses of kind k, opened, reopened if the interface was re-created
// or changed its MAC, and for NDP in the VIPs' multicast groups.
func (w *worker) syncSocket(k kind, ifi *net.Interface, vips vipSet) error {
	s := w.socks[k]
	if s != nil && (s.index != ifi.Index || !bytes.Equal(s.mac, ifi.HardwareAddr)) {
		// Re-created (new index) or given a new MAC: the socket is bound to
		// the old device or replies would carry the old MAC.
		w.log.Info("interface changed; reopening its socket", "proto", k, "index", ifi.Index, "mac", ifi.HardwareAddr.String())
		w.closeSocket(k)
		s = nil
	}
	if !vips.hasKind(k) {
		w.closeSocket(k)
		return nil
	}
	if s == nil {
		var err error
		if s, err = openSocket(k, ifi, w.log, func() vipSet { return *w.vips.Load() }, w.down); err != nil {
			return err
		}
		w.socks[k] = s
	}
	if s.groups != nil {
		return s.groups.set(solicitedNodeGroups(vips))
	}
	return nil
}

// sync schedules gratuitous ARP for VIPs not yet announced on their
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
	if !w.up {
		return
	}
	if w.announced == nil {
		w.announced = map[netip.Addr]bool{}
	}
	for _, v := range vips {
		if !w.announced[v] && w.socks[kindOf(v)] != nil {
			w.announced[v] = true
			w.pending = append(w.pending, announcement{vip: v, start: now})
		}
	}
	w.sendDue(now)
}

// sendDue sends one round of gratuitous ARP (an unsolicited neighbour
// advertisement) for each VIP whose next round is due. Rounds missed while
// the worker was busy collapse into one.
func (w *worker) sendDue(now time.Time) {
	for i := range w.pending {
		a := &w.pending[i]
		due := false
		for a.next < len(w.gratuitous) && !a.start.Add(w.gratuitous[a.next]).After(now) {
			a.next++
			due = true
		}
		k := kindOf(a.vip)
		if s := w.socks[k]; due && s != nil {
			if err := s.sendGratuitous(a.vip); err != nil {
				w.log.Warn("sending "+k.announcement(), "vip", a.vip, "err", err)
			} else {
				w.log.Debug("sent "+k.announcement(), "vip", a.vip, "round", a.next)
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

// closeSocket closes k's socket, if open, and forgets that its VIPs were
// announced: a new socket announces them again.
func (w *worker) closeSocket(k kind) {
	if w.socks[k] == nil {
		return
	}
	w.socks[k].close()
	w.socks[k] = nil
	isK := func(v netip.Addr) bool { return kindOf(v) == k }
	maps.DeleteFunc(w.announced, func(v netip.Addr, _ bool) bool { return isK(v) })
	w.pending = slices.DeleteFunc(w.pending, func(a announcement) bool { return isK(a.vip) })
}

func (w *worker) closeSockets() {
	for k := range numKinds {
		w.closeSocket(k)
	}
	w.up = false
}
