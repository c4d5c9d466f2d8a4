// Package syncd keeps the kernel's IPVS connection-sync daemons running as
// lbd wants them, so that the backup box of a failover pair knows the
// connections the master forwards and keeps them alive across a switch.
//
// The daemons are kernel threads, at most one master (sends the state of
// the connections it forwards, over UDP multicast) and one backup
// (receives it) per network namespace. They are started and stopped over
// the IPVS generic netlink family (netlink_linux.go); the kernel cannot
// change a running daemon's settings, so the Applier stops one that
// differs and starts it again.
//
// The sync protocol version the master sends is the sysctl
// net.ipv4.vs.sync_version (1 by default); lbd reads it (SyncVersion) and
// never sets it: both boxes take it from their sysctl.d.
package syncd

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Role is what a sync daemon does; the values are the kernel's states
// (IP_VS_STATE_MASTER, IP_VS_STATE_BACKUP in include/uapi/linux/ip_vs.h).
type Role int

const (
	// Master sends the state of the connections this box forwards.
	Master Role = 1
	// Backup receives the master's messages and creates the connections.
	Backup Role = 2
)

func (r Role) String() string {
	switch r {
	case Master:
		return "master"
	case Backup:
		return "backup"
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// DefaultGroup returns the multicast group of a daemon started without
// one (IP_VS_SYNC_GROUP, 224.0.0.81: link-local, so bridges flood it
// without IGMP snooping in the way).
func DefaultGroup() netip.Addr { return netip.AddrFrom4([4]byte{224, 0, 0, 81}) }

// The kernel's other defaults for settings left at zero (ip_vs_sync.c,
// start_sync_thread; include/net/ip_vs.h).
const (
	// DefaultPort is the UDP port of a daemon started without one
	// (IP_VS_SYNC_PORT). With net.ipv4.vs.sync_ports = N the kernel uses
	// the N ports from it.
	DefaultPort = 8848
	// DefaultTTL is the multicast TTL of a daemon started without one.
	DefaultTTL = 1
	// maxIfname is the longest interface name the kernel takes
	// (IP_VS_IFNAME_MAXLEN 16 with its NUL).
	maxIfname = 15
	// defaultMTU is what the kernel sizes a master's messages by, and a
	// backup's least buffer, whatever the interface's MTU.
	defaultMTU = 1500
	// minBackupMaxLen is the least payload a backup accepts as MaxLen; a
	// master takes any from 1.
	minBackupMaxLen = 1024
	// UDP and IP header lengths the kernel takes off an MTU.
	udp4HeaderLen = 20 + 8
	udp6HeaderLen = 40 + 8
)

// Daemon is one sync daemon: how the kernel runs it or how lbd wants it.
// Zero values of the optional settings take the kernel's defaults.
type Daemon struct {
	Role      Role
	Interface string // the multicast interface
	// SyncID is keepalived's lvs_sync_daemon id: a master stamps its
	// messages with it and a backup takes only its own (a backup with 0
	// takes every id).
	SyncID uint8
	// MaxLen is the most UDP payload a message takes; 0 is the kernel's
	// default (1472 for a master; for a backup, from the interface's MTU).
	// The kernel clamps other values (a backup's to 1024 at least).
	MaxLen uint16
	Group  netip.Addr // multicast group, IPv4 or IPv6; invalid is DefaultGroup()
	Port   uint16     // UDP port; 0 is DefaultPort
	TTL    uint8      // multicast TTL; 0 is DefaultTTL
}

func (d Daemon) String() string {
	r := d.Resolved()
	maxLen := "default"
	if r.MaxLen != 0 {
		maxLen = fmt.Sprint(r.MaxLen)
	}
	return fmt.Sprintf("%s sync daemon on %s (syncid %d, group %s, ttl %d, maxlen %s)",
		d.Role, d.Interface, d.SyncID, netip.AddrPortFrom(r.Group, r.Port), r.TTL, maxLen)
}

// Resolved returns d with the kernel's defaults in place of zero settings
// and MaxLen clamped as the kernel clamps it: what the kernel reports once
// it runs d. A backup's default MaxLen depends on the interface's MTU at
// start and stays 0 here.
func (d Daemon) Resolved() Daemon {
	if !d.Group.IsValid() {
		d.Group = DefaultGroup()
	}
	d.Group = d.Group.Unmap().WithZone("")
	if d.Port == 0 {
		d.Port = DefaultPort
	}
	if d.TTL == 0 {
		d.TTL = DefaultTTL
	}
	hlen := uint16(udp4HeaderLen)
	if d.Group.Is6() {
		hlen = udp6HeaderLen
	}
	switch {
	case d.MaxLen != 0:
		least := uint16(1)
		if d.Role == Backup {
			least = minBackupMaxLen
		}
		d.MaxLen = min(max(d.MaxLen, least), 65535-hlen)
	case d.Role == Master:
		d.MaxLen = defaultMTU - hlen
	}
	return d
}

// Matches reports whether a running daemon, as the kernel reports it,
// is the wanted d once defaults are resolved.
func (d Daemon) Matches(running Daemon) bool {
	w, g := d.Resolved(), running.Resolved()
	if w.MaxLen == 0 { // a backup's default: whatever the MTU gave
		g.MaxLen = 0
	}
	return w == g
}

// Validate checks what the kernel would refuse, before anything is
// stopped for it.
func (d Daemon) Validate() error {
	switch {
	case d.Role != Master && d.Role != Backup:
		return fmt.Errorf("sync daemon role %d: neither master (1) nor backup (2)", int(d.Role))
	case d.Interface == "":
		return fmt.Errorf("%s sync daemon: no interface", d.Role)
	case len(d.Interface) > maxIfname || strings.ContainsAny(d.Interface, "\x00/ "):
		return fmt.Errorf("%s sync daemon: %q is not an interface name (at most %d bytes, no '/' or spaces)", d.Role, d.Interface, maxIfname)
	case d.Group.IsValid() && !d.Group.IsMulticast():
		return fmt.Errorf("%s sync daemon: group %s is not a multicast address", d.Role, d.Group)
	}
	return nil
}

// ErrRunning is the kernel's answer (EEXIST) to starting a daemon of a
// role that already runs.
var ErrRunning = errors.New("a sync daemon of that role is already running")

// ErrNotRunning is the kernel's answer (ESRCH) to stopping a daemon of a
// role that does not run.
var ErrNotRunning = errors.New("no sync daemon of that role is running")

// Kernel is the network namespace's sync daemons.
type Kernel interface {
	// List returns the running daemons, at most one per role, with the
	// settings the kernel resolved.
	List() ([]Daemon, error)
	// Start starts d; ErrRunning (wrapped) if one of its role runs.
	Start(d Daemon) error
	// Stop stops the daemon of role r; ErrNotRunning (wrapped) if none.
	Stop(r Role) error
}

// Stats says what one Apply changed.
type Stats struct {
	Started []Role // were not running
	Stopped []Role // were running, not wanted
	// Restarted ran with other settings and were stopped and started
	// again: what the master sent meanwhile, or the backup would have
	// received, is lost.
	Restarted []Role
}

// Changed reports whether Apply changed anything.
func (s Stats) Changed() bool {
	return len(s.Started)+len(s.Stopped)+len(s.Restarted) > 0
}

// Applier makes a Kernel run the wanted daemons.
type Applier struct {
	k Kernel
}

// New returns an Applier for k.
func New(k Kernel) *Applier { return &Applier{k: k} }

// Apply makes the kernel run exactly want (at most one daemon per role):
// it starts the missing, stops the unwanted, and stops and starts again a
// running one whose settings differ. It reads the kernel each time, so a
// daemon stopped behind lbd's back is started again. An invalid want
// changes nothing; a failure for one role does not stop the other's.
func (a *Applier) Apply(want []Daemon) (Stats, error) {
	var st Stats
	wanted, err := byRole(want)
	if err != nil {
		return st, err
	}
	list, err := a.k.List()
	if err != nil {
		return st, fmt.Errorf("listing the IPVS sync daemons: %w", err)
	}
	running := map[Role]Daemon{}
	for _, d := range list {
		running[d.Role] = d
	}
	var errs []error
	for _, r := range []Role{Master, Backup} {
		w, isWanted := wanted[r]
		g, isRunning := running[r]
		switch {
		case isWanted && !isRunning:
			if err := a.start(w); err != nil {
				errs = append(errs, err)
				continue
			}
			st.Started = append(st.Started, r)
		case !isWanted && isRunning:
			if err := a.stop(g); err != nil {
				errs = append(errs, err)
				continue
			}
			st.Stopped = append(st.Stopped, r)
		case isWanted && !w.Matches(g):
			if err := a.stop(g); err != nil {
				errs = append(errs, fmt.Errorf("restarting with other settings: %w", err))
				continue
			}
			if err := a.start(w); err != nil {
				errs = append(errs, fmt.Errorf("restarting with other settings (it is stopped now): %w", err))
				continue
			}
			st.Restarted = append(st.Restarted, r)
		}
	}
	return st, errors.Join(errs...)
}

func (a *Applier) start(d Daemon) error {
	if err := a.k.Start(d); err != nil {
		return fmt.Errorf("starting the IPVS %s sync daemon on %s: %w", d.Role, d.Interface, err)
	}
	return nil
}

// stop stops running; one already gone is what was wanted.
func (a *Applier) stop(running Daemon) error {
	if err := a.k.Stop(running.Role); err != nil && !errors.Is(err, ErrNotRunning) {
		return fmt.Errorf("stopping the IPVS %s sync daemon on %s: %w", running.Role, running.Interface, err)
	}
	return nil
}

// byRole validates want and indexes it by role.
func byRole(want []Daemon) (map[Role]Daemon, error) {
	m := make(map[Role]Daemon, len(want))
	for _, d := range want {
		if err := d.Validate(); err != nil {
			return nil, err
		}
		if _, dup := m[d.Role]; dup {
			return nil, fmt.Errorf("two %s sync daemons wanted: the kernel runs one per role", d.Role)
		}
		m[d.Role] = d
	}
	return m, nil
}
