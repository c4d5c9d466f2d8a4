package vrrp

import (
	"net/netip"
	"slices"
	"time"
)

// State is an instance's VRRP state.
type State int

const (
	// Init: not started, or stopped.
	Init State = iota
	// Backup: listening; the addresses are not held.
	Backup
	// Master: advertising and holding the addresses.
	Master
	// Fault: a tracked interface is down, or a tracked check fails
	// (keepalived's FAULT): the instance stays out of the election and
	// holds nothing, once a make-before-break hold (see Group) is over.
	Fault
)

// FaultKind is how badly an instance is faulty, which decides how a
// master gives its addresses up. Kinds are ordered: the worst wins.
type FaultKind int

const (
	NoFault FaultKind = iota
	// SoftFault: the box still forwards, but should not be master (its
	// syncs keep failing, a tracked service is below quorum): a master
	// gives way make-before-break, as a preempted one does.
	SoftFault
	// HardFault: a tracked interface is down: what the box holds cannot
	// be served, so a master gives everything up at once.
	HardFault
)

func (s State) String() string {
	switch s {
	case Backup:
		return "BACKUP"
	case Master:
		return "MASTER"
	case Fault:
		return "FAULT"
	}
	return "INIT"
}

// Cause says why an instance changed state.
type Cause int

const (
	CauseStart         Cause = iota // started as backup
	CauseMasterDown                 // no advert for the master-down interval
	CauseHigherPeer                 // an advert that outranks this box
	CausePreempt                    // lower-priority master, preempt on
	CauseFault                      // a tracked interface went down
	CauseFaultCleared               // the fault is cleared
	CauseStop                       // lbd stops
	CauseGroup                      // another instance of its sync group moved
	CauseMasterStopped              // the master sent priority 0
	CauseTracked                    // a tracked check fails (a SoftFault)
)

func (c Cause) String() string {
	return [...]string{
		CauseStart:         "start",
		CauseMasterDown:    "no advert from the master within the master-down interval",
		CauseHigherPeer:    "an advert from a peer that outranks this box",
		CausePreempt:       "preempting a lower-priority master",
		CauseFault:         "a tracked interface is down",
		CauseFaultCleared:  "the fault is cleared",
		CauseStop:          "stopping",
		CauseGroup:         "its sync group moved",
		CauseMasterStopped: "the master stopped (priority 0)",
		CauseTracked:       "a tracked check fails (syncs, services)",
	}[c]
}

// Refusal says why a received advert was not taken.
type Refusal int

const (
	Taken           Refusal = iota
	RefusedVersion          // not the instance's VRRP version
	RefusedAuth             // version 2 authentication differs
	RefusedInterval         // version 2: another advertisement interval
	RefusedAddrs            // not the instance's address list
	RefusedPeer             // not from a configured unicast peer
	RefusedSelf             // our own advert, looped back
)

func (r Refusal) String() string {
	return [...]string{
		Taken:           "taken",
		RefusedVersion:  "version",
		RefusedAuth:     "authentication",
		RefusedInterval: "interval",
		RefusedAddrs:    "addresses",
		RefusedPeer:     "peer",
		RefusedSelf:     "self",
	}[r]
}

// Params are an instance's protocol settings.
type Params struct {
	Version  int
	VRID     uint8
	Priority uint8
	Interval time.Duration
	// Preempt lets a backup with a higher priority take over from a
	// master; PreemptDelay holds that back after start.
	Preempt      bool
	PreemptDelay time.Duration
	// Addrs are the addresses adverts carry (keepalived's
	// virtual_ipaddress); received adverts must carry the same set.
	Addrs []netip.Addr
	// Self is this box's primary address on the link: the source of its
	// adverts and the tie-break between equal priorities.
	Self netip.Addr
	// Peers, when set, are the only senders accepted (unicast).
	Peers []netip.Addr
	// AuthPass is version 2's password; "" for none.
	AuthPass string
}

// Transition is a change of state with its cause.
type Transition struct {
	From, To State
	Cause    Cause
}

// Output is what one step of a Machine asks of its runner: adverts to send
// (in order) and the transition, if any. Announce asks for the master's
// gratuitous ARP / unsolicited neighbour advertisements again without a
// transition (after a split brain heals, neighbours may point elsewhere).
type Output struct {
	Send       []Advert
	Transition *Transition
	Announce   bool
}

// Machine is one VRRP instance's state machine (RFC 5798 section 6.4 and
// RFC 3768 for version 2). It does no I/O and reads no clock: its runner
// hands it the time, received adverts and timer ticks.
type Machine struct {
	p     Params
	state State
	// masterAdver is the interval the master advertises with (version 3
	// backups learn it from the master's adverts).
	masterAdver time.Duration
	masterDown  time.Time // Backup: deadline of the master-down timer
	// held: the master-down timer ran out, but the sync group is not
	// ready; the backup waits for the group without a timer.
	held bool
	// stopped: the master-down timer was cut short by a priority-0
	// advert (the master stopped), for the transition's cause.
	stopped bool
	adverAt time.Time // Master: when the next advert is due
	started time.Time
	// lastAnnounce and lastStopAnnounce rate-limit the re-announcements a
	// master makes when it hears a lower-priority master, and when it hears
	// another box give addresses up (priority 0).
	lastAnnounce, lastStopAnnounce time.Time
	// Master is the address of the master last heard, and its priority.
	master     netip.Addr
	masterPrio uint8
}

// NewMachine returns a machine in Init.
func NewMachine(p Params) *Machine {
	return &Machine{p: p, masterAdver: p.Interval}
}

// State returns the current state.
func (m *Machine) State() State { return m.state }

// Params returns the machine's settings.
func (m *Machine) Params() Params { return m.p }

// MasterSeen returns the master last heard (invalid when none) and its
// priority.
func (m *Machine) MasterSeen() (netip.Addr, uint8) { return m.master, m.masterPrio }

// skew is the skew time: a lower priority waits longer.
func (m *Machine) skew() time.Duration {
	base := m.masterAdver
	if m.p.Version == 2 {
		base = time.Second
	}
	return time.Duration(256-int64(m.p.Priority)) * base / 256
}

// MasterDownInterval is how long a backup waits for an advert before it
// takes over.
func (m *Machine) MasterDownInterval() time.Duration {
	adver := m.masterAdver
	if m.p.Version == 2 {
		adver = m.p.Interval
	}
	return 3*adver + m.skew()
}

// Deadline is when Tick must next be called; zero when no timer runs.
func (m *Machine) Deadline() time.Time {
	switch m.state {
	case Backup:
		if m.held {
			return time.Time{}
		}
		return m.masterDown
	case Master:
		return m.adverAt
	}
	return time.Time{}
}

// advert is this instance's advertisement at priority prio.
func (m *Machine) advert(prio uint8) Advert {
	a := Advert{Version: m.p.Version, VRID: m.p.VRID, Priority: prio, Interval: m.p.Interval, Addrs: m.p.Addrs}
	if m.p.Version == 2 && m.p.AuthPass != "" {
		a.AuthType = AuthPass
		copy(a.AuthData[:], m.p.AuthPass)
	}
	return a
}

// Start enters Backup (an instance never starts as master: a restarted box
// must not take the addresses from a running master).
func (m *Machine) Start(now time.Time) Output {
	m.started = now
	return m.toBackup(now, CauseStart)
}

func (m *Machine) toBackup(now time.Time, c Cause) Output {
	from := m.state
	m.state = Backup
	m.masterAdver = m.p.Interval
	m.setMasterDown(now.Add(m.MasterDownInterval()))
	if from == Backup {
		return Output{}
	}
	return Output{Transition: &Transition{From: from, To: Backup, Cause: c}}
}

func (m *Machine) toMaster(now time.Time, c Cause) Output {
	from := m.state
	m.state = Master
	m.adverAt = now.Add(m.p.Interval)
	m.master, m.masterPrio = m.p.Self, m.p.Priority
	return Output{Send: []Advert{m.advert(m.p.Priority)}, Transition: &Transition{From: from, To: Master, Cause: c}}
}

// MasterDue reports whether a backup's master-down timer has run out.
func (m *Machine) MasterDue(now time.Time) bool {
	return m.state == Backup && !now.Before(m.masterDown)
}

func (m *Machine) setMasterDown(t time.Time) {
	m.masterDown, m.held, m.stopped = t, false, false
}

// Tick runs the timers due at now. A backup whose master-down timer ran
// out becomes master when promote is true; otherwise (its sync group is
// not ready) it is held: it stays due, without a timer, until the group
// is ready or an advert comes.
func (m *Machine) Tick(now time.Time, promote bool) Output {
	switch {
	case m.state == Master && !now.Before(m.adverAt):
		m.adverAt = now.Add(m.p.Interval)
		return Output{Send: []Advert{m.advert(m.p.Priority)}}
	case m.MasterDue(now) && promote && m.stopped:
		return m.toMaster(now, CauseMasterStopped)
	case m.MasterDue(now) && promote:
		return m.toMaster(now, CauseMasterDown)
	case m.MasterDue(now):
		m.held = true
	}
	return Output{}
}

// Promote makes a backup master at once (its sync group moved).
func (m *Machine) Promote(now time.Time) Output {
	if m.state != Backup {
		return Output{}
	}
	return m.toMaster(now, CauseGroup)
}

// Demote makes a master backup because its sync group moved. It sends
// priority 0, so the peer's instance takes over after its skew time
// rather than a whole master-down interval.
func (m *Machine) Demote(now time.Time) Output {
	if m.state != Master {
		return Output{}
	}
	out := m.toBackup(now, CauseGroup)
	out.Send = []Advert{m.advert(0)}
	return out
}

// SetFault enters Fault (k says why) or leaves it for Backup (NoFault).
// A master leaving sends priority 0 so that the backup takes over at once.
func (m *Machine) SetFault(now time.Time, k FaultKind) Output {
	switch {
	case k != NoFault && m.state != Fault && m.state != Init:
		c := CauseFault
		if k == SoftFault {
			c = CauseTracked
		}
		return m.leave(Fault, c)
	case k == NoFault && m.state == Fault:
		return m.toBackup(now, CauseFaultCleared)
	}
	return Output{}
}

// Stop enters Init; a master sends priority 0 first (RFC 5798 6.4.3).
func (m *Machine) Stop() Output {
	if m.state == Init {
		return Output{}
	}
	return m.leave(Init, CauseStop)
}

func (m *Machine) leave(to State, c Cause) Output {
	from := m.state
	m.state = to
	m.master, m.masterPrio = netip.Addr{}, 0
	out := Output{Transition: &Transition{From: from, To: to, Cause: c}}
	if from == Master {
		out.Send = []Advert{m.advert(0)}
	}
	return out
}

// Check says whether an advert from src may be taken at all, whatever the
// state: the same version, authentication, interval (version 2) and
// address list as this instance, from a configured peer.
func (m *Machine) Check(src netip.Addr, a Advert) Refusal {
	switch {
	case src == m.p.Self:
		return RefusedSelf
	case len(m.p.Peers) > 0 && !slices.Contains(m.p.Peers, src):
		return RefusedPeer
	case a.Version != m.p.Version:
		return RefusedVersion
	case a.Version == 2 && a.AuthType != m.advert(0).AuthType,
		a.Version == 2 && a.AuthData != m.advert(0).AuthData:
		return RefusedAuth
	case a.Version == 2 && a.Interval != m.p.Interval:
		// RFC 3768: a version 2 backup times with its own interval, so
		// a master advertising another would be declared down wrongly.
		return RefusedInterval
	case !sameAddrs(a.Addrs, m.p.Addrs):
		return RefusedAddrs
	}
	return Taken
}

func sameAddrs(a, b []netip.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	x, y := slices.Clone(a), slices.Clone(b)
	slices.SortFunc(x, netip.Addr.Compare)
	slices.SortFunc(y, netip.Addr.Compare)
	return slices.Equal(x, y)
}

// Receive takes an advert from src (already checked with Check).
func (m *Machine) Receive(now time.Time, src netip.Addr, a Advert) Output {
	switch m.state {
	case Backup:
		return m.receiveBackup(now, src, a)
	case Master:
		return m.receiveMaster(now, src, a)
	}
	return Output{}
}

func (m *Machine) receiveBackup(now time.Time, src netip.Addr, a Advert) Output {
	if a.Priority == 0 {
		// The master stops: take over after the skew time only, so that
		// of several backups the highest priority goes first.
		m.setMasterDown(now.Add(m.skew()))
		m.master, m.masterPrio, m.stopped = netip.Addr{}, 0, true
		return Output{}
	}
	preempting := m.p.Preempt && !now.Before(m.started.Add(m.p.PreemptDelay))
	if preempting && a.Priority < m.p.Priority {
		// Discard: the master-down timer runs out and this box takes over.
		return Output{}
	}
	m.master, m.masterPrio = src, a.Priority
	if m.p.Version == 3 {
		m.masterAdver = a.Interval
	}
	m.setMasterDown(now.Add(m.MasterDownInterval()))
	return Output{}
}

func (m *Machine) receiveMaster(now time.Time, src netip.Addr, a Advert) Output {
	switch {
	case a.Priority == 0:
		// Another box gives addresses up: a master that stops, or one
		// that stepped down for this one and has released them (a heal
		// where this box never heard the other as master). Tell the
		// backups at once who is master (RFC 5798 6.4.3), and announce
		// the addresses again: neighbours may have learned the other box.
		m.adverAt = now.Add(m.p.Interval)
		out := Output{Send: []Advert{m.advert(m.p.Priority)}}
		if now.Sub(m.lastStopAnnounce) >= m.MasterDownInterval() {
			m.lastStopAnnounce, out.Announce = now, true
		}
		return out
	case outranks(a.Priority, src, m.p.Priority, m.p.Self):
		out := m.toBackup(now, CauseHigherPeer)
		m.master, m.masterPrio = src, a.Priority
		if m.p.Version == 3 {
			m.masterAdver = a.Interval
			m.setMasterDown(now.Add(m.MasterDownInterval()))
		}
		return out
	}
	// A lower-priority master: two masters after a partition heals. Ours
	// wins; advertise at once so the other steps down, and announce the
	// addresses again, since neighbours may have learned the other box.
	// At most once per master-down interval.
	if now.Sub(m.lastAnnounce) < m.MasterDownInterval() {
		return Output{}
	}
	m.lastAnnounce = now
	m.adverAt = now.Add(m.p.Interval)
	return Output{Send: []Advert{m.advert(m.p.Priority)}, Announce: true}
}

// outranks reports whether a sender with priority prio and address src
// wins over a box with priority own and address self (RFC 5798 6.4.3).
func outranks(prio uint8, src netip.Addr, own uint8, self netip.Addr) bool {
	return prio > own || prio == own && src.Compare(self) > 0
}
