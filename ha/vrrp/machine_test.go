package vrrp

import (
	"net/netip"
	"testing"
	"time"
)

var (
	t0   = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	self = netip.MustParseAddr("198.18.2.2")
	peer = netip.MustParseAddr("198.18.2.3") // above self: wins ties
	low  = netip.MustParseAddr("198.18.2.1") // below self
	vip  = netip.MustParseAddr("198.18.2.10")
)

func params(mod ...func(*Params)) Params {
	p := Params{Version: 3, VRID: 51, Priority: 100, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{vip}, Self: self}
	for _, f := range mod {
		f(&p)
	}
	return p
}

func from(p Params, prio uint8) Advert {
	m := NewMachine(p)
	return m.advert(prio)
}

func TestMasterDownInterval(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Params
		want time.Duration
	}{
		// keepalived's defaults: 3 s + (256-100)/256 s, the ~3.6 s admins see.
		{"v2 1s prio 100", params(func(p *Params) { p.Version, p.Interval = 2, time.Second }), 3609375 * time.Microsecond},
		{"v3 100ms prio 100", params(), 300*time.Millisecond + 60937500},
		{"v3 100ms prio 254", params(func(p *Params) { p.Priority = 254 }), 300*time.Millisecond + 781250},
		{"v3 10ms prio 1", params(func(p *Params) { p.Interval, p.Priority = 10*time.Millisecond, 1 }), 30*time.Millisecond + 9960937},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewMachine(tc.p).MasterDownInterval(); got != tc.want {
				t.Errorf("master-down interval %v, want %v", got, tc.want)
			}
		})
	}
}

// event is one step of a scenario: at offset at, either a tick, an advert
// from src at prio, a fault change, or a stop.
type event struct {
	at    time.Duration
	kind  string // "tick", "advert", "fault", "soft fault", "clear", "stop"
	src   netip.Addr
	prio  uint8
	state State // expected afterwards
	sent  []uint8
	cause Cause // of the transition, when the state changed
	ann   bool  // Announce expected
}

func TestMachine(t *testing.T) {
	mdi := NewMachine(params()).MasterDownInterval() // 360.9375 ms
	for _, tc := range []struct {
		name   string
		p      Params
		events []event
	}{
		{"no master: takes over after the master-down interval", params(), []event{
			{at: mdi - time.Millisecond, kind: "tick", state: Backup},
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 100*time.Millisecond, kind: "tick", state: Master, sent: []uint8{100}},
		}},
		{"a master's adverts hold the timer", params(), []event{
			{at: 300 * time.Millisecond, kind: "advert", src: peer, prio: 150, state: Backup},
			{at: 600 * time.Millisecond, kind: "tick", state: Backup},
			{at: 300*time.Millisecond + mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
		}},
		{"no preempt: a lower master holds the timer too", params(), []event{
			{at: 300 * time.Millisecond, kind: "advert", src: low, prio: 50, state: Backup},
			{at: 600 * time.Millisecond, kind: "tick", state: Backup},
		}},
		{"preempt: a lower master's adverts are discarded", params(func(p *Params) { p.Preempt = true }), []event{
			{at: 300 * time.Millisecond, kind: "advert", src: low, prio: 50, state: Backup},
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
		}},
		{"preempt delay: no preemption right after start", params(func(p *Params) { p.Preempt, p.PreemptDelay = true, time.Second }), []event{
			{at: 300 * time.Millisecond, kind: "advert", src: low, prio: 50, state: Backup},
			{at: mdi, kind: "tick", state: Backup},
			{at: 1100 * time.Millisecond, kind: "advert", src: low, prio: 50, state: Backup},
			{at: 300*time.Millisecond + mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
		}},
		{"the master stops: take over after the skew time", params(), []event{
			{at: 100 * time.Millisecond, kind: "advert", src: peer, prio: 150, state: Backup},
			{at: 200 * time.Millisecond, kind: "advert", src: peer, prio: 0, state: Backup},
			{at: 200*time.Millisecond + 60937500, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterStopped},
		}},
		{"master meets a higher peer", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 101, state: Backup, cause: CauseHigherPeer},
		}},
		{"equal priorities: the higher address wins", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 100, state: Master, sent: []uint8{100}, ann: true},
			{at: mdi + 20*time.Millisecond, kind: "advert", src: peer, prio: 100, state: Backup, cause: CauseHigherPeer},
		}},
		{"split brain heals: one re-announce per master-down interval", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 90, state: Master, sent: []uint8{100}, ann: true},
			{at: mdi + 20*time.Millisecond, kind: "advert", src: low, prio: 90, state: Master},
		}},
		{"another box gives the addresses up: advertise and announce at once", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 0, state: Master, sent: []uint8{100}, ann: true},
			{at: mdi + 20*time.Millisecond, kind: "advert", src: low, prio: 0, state: Master, sent: []uint8{100}},
			{at: 2*mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 0, state: Master, sent: []uint8{100}, ann: true},
		}},
		// A two-sided heal: this box heard the other as master and
		// announced; the other then released its addresses (priority 0),
		// which neighbours may have learned in between: announce again.
		{"a heal's release after its re-announce: announce again", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + 10*time.Millisecond, kind: "advert", src: low, prio: 90, state: Master, sent: []uint8{100}, ann: true},
			{at: mdi + 110*time.Millisecond, kind: "advert", src: low, prio: 0, state: Master, sent: []uint8{100}, ann: true},
		}},
		{"stop as master sends priority 0", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + time.Millisecond, kind: "stop", state: Init, sent: []uint8{0}, cause: CauseStop},
		}},
		{"fault as master sends priority 0; cleared, backup again", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + time.Millisecond, kind: "fault", state: Fault, sent: []uint8{0}, cause: CauseFault},
			{at: 2 * mdi, kind: "advert", src: peer, prio: 150, state: Fault},
			{at: 3 * mdi, kind: "clear", state: Backup, cause: CauseFaultCleared},
			{at: 4*mdi - time.Millisecond, kind: "tick", state: Backup},
			{at: 4 * mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
		}},
		{"a soft fault as master names the tracked check", params(), []event{
			{at: mdi, kind: "tick", state: Master, sent: []uint8{100}, cause: CauseMasterDown},
			{at: mdi + time.Millisecond, kind: "soft fault", state: Fault, sent: []uint8{0}, cause: CauseTracked},
			{at: 2 * mdi, kind: "clear", state: Backup, cause: CauseFaultCleared},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMachine(tc.p)
			if out := m.Start(t0); m.State() != Backup || out.Transition == nil || out.Transition.Cause != CauseStart || len(out.Send) != 0 {
				t.Fatalf("Start: state %v, output %+v; want BACKUP, nothing sent", m.State(), out)
			}
			for i, e := range tc.events {
				now := t0.Add(e.at)
				before := m.State()
				var out Output
				switch e.kind {
				case "tick":
					out = m.Tick(now, true)
				case "advert":
					a := from(tc.p, e.prio)
					if r := m.Check(e.src, a); r != Taken {
						t.Fatalf("event %d: advert refused: %v", i, r)
					}
					out = m.Receive(now, e.src, a)
				case "fault":
					out = m.SetFault(now, HardFault)
				case "soft fault":
					out = m.SetFault(now, SoftFault)
				case "clear":
					out = m.SetFault(now, NoFault)
				case "stop":
					out = m.Stop()
				}
				checkOutput(t, i, m, before, out, e)
			}
		})
	}
}

func checkOutput(t *testing.T, i int, m *Machine, before State, out Output, e event) {
	t.Helper()
	if m.State() != e.state {
		t.Fatalf("event %d (%s at %v): state %v, want %v", i, e.kind, e.at, m.State(), e.state)
	}
	var prios []uint8
	for _, a := range out.Send {
		prios = append(prios, a.Priority)
	}
	if string(prios) != string(e.sent) {
		t.Errorf("event %d (%s at %v): sent priorities %v, want %v", i, e.kind, e.at, prios, e.sent)
	}
	switch tr := out.Transition; {
	case before == e.state && tr != nil:
		t.Errorf("event %d: transition %+v, want none", i, *tr)
	case before != e.state && (tr == nil || tr.From != before || tr.To != e.state || tr.Cause != e.cause):
		t.Errorf("event %d: transition %+v, want %v -> %v (%v)", i, tr, before, e.state, e.cause)
	}
	if out.Announce != e.ann {
		t.Errorf("event %d: announce %v, want %v", i, out.Announce, e.ann)
	}
}

func TestCheck(t *testing.T) {
	v2 := params(func(p *Params) { p.Version, p.Interval, p.AuthPass = 2, time.Second, "secret" })
	for _, tc := range []struct {
		name string
		p    Params
		src  netip.Addr
		mod  func(*Advert)
		want Refusal
	}{
		{"same settings", params(), peer, nil, Taken},
		{"own advert", params(), self, nil, RefusedSelf},
		{"other version", params(), peer, func(a *Advert) { a.Version = 2; a.Interval = time.Second }, RefusedVersion},
		{"addresses reordered", params(func(p *Params) { p.Addrs = []netip.Addr{vip, low} }), peer, func(a *Advert) { a.Addrs = []netip.Addr{low, vip} }, Taken},
		{"an address missing", params(func(p *Params) { p.Addrs = []netip.Addr{vip, low} }), peer, func(a *Advert) { a.Addrs = []netip.Addr{vip} }, RefusedAddrs},
		{"not a configured peer", params(func(p *Params) { p.Peers = []netip.Addr{peer} }), low, nil, RefusedPeer},
		{"a configured peer", params(func(p *Params) { p.Peers = []netip.Addr{peer} }), peer, nil, Taken},
		{"v2 password", v2, peer, nil, Taken},
		{"v2 wrong password", v2, peer, func(a *Advert) { a.AuthData = [8]byte{'x'} }, RefusedAuth},
		{"v2 no authentication", v2, peer, func(a *Advert) { a.AuthType, a.AuthData = AuthNone, [8]byte{} }, RefusedAuth},
		{"v2 AH", v2, peer, func(a *Advert) { a.AuthType = AuthAH }, RefusedAuth},
		{"v2 other interval", v2, peer, func(a *Advert) { a.Interval = 2 * time.Second }, RefusedInterval},
		{"v3 other interval is learned", params(), peer, func(a *Advert) { a.Interval = time.Second }, Taken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := from(tc.p, 150)
			if tc.mod != nil {
				tc.mod(&a)
			}
			if got := NewMachine(tc.p).Check(tc.src, a); got != tc.want {
				t.Errorf("Check = %v, want %v", got, tc.want)
			}
		})
	}
}

// A version 3 backup times with the master's interval, not its own.
func TestBackupLearnsTheMastersInterval(t *testing.T) {
	p := params()
	m := NewMachine(p)
	m.Start(t0)
	a := from(p, 200)
	a.Interval = time.Second
	m.Receive(t0, peer, a)
	want := 3*time.Second + 156*time.Second/256 // 3 × 1 s + (256-100)/256 × 1 s
	if got := m.Deadline().Sub(t0); got != want {
		t.Errorf("master-down after a 1 s master: %v, want %v", got, want)
	}
}
