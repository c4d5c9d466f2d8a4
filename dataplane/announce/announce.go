// Package announce answers ARP for lbd's IPv4 VIPs and neighbour
// solicitations (NDP) for its IPv6 ones on the interfaces that services
// with announce = "arp" name, and sends gratuitous ARP or unsolicited
// neighbour advertisements when it starts answering for one, so that
// switches and neighbours learn the VIP at once.
//
// With strict ARP (arp_ignore=1, arp_announce=2) and the VIPs on lbd's
// dummy link, the kernel does not answer ARP for them on the outside
// interface, nor, whatever the settings, neighbour solicitations; this
// package does, with that interface's MAC. Like MetalLB's layer-2
// responder it only answers for the addresses it is handed: which VIPs to
// announce where is decided by the caller, who passes the complete set to
// Set after each sync.
//
// It needs CAP_NET_RAW: one AF_PACKET socket per interface and family
// with VIPs, the IPv6 one filtered in the kernel down to neighbour
// discovery. The interface needs no IP address of its own: ARP replies
// carry the VIP as the sender address, and neighbour advertisements come
// from the VIP, as the kernel's do for its own addresses. For IPv6 it
// joins each VIP's solicited-node multicast group on the interface, so
// that the NIC's filter and MLD-snooping switches let the solicitations
// through.
package announce

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// DefaultRecheck is how often an interface is looked up again when
// Options.Recheck is zero.
const DefaultRecheck = 2 * time.Second

// Options configures an Announcer. Zero values take the defaults noted.
type Options struct {
	// Logger receives the announcer's logs; default slog.Default().
	Logger *slog.Logger
	// Gratuitous lists when gratuitous ARP (one request and one reply,
	// both broadcast) or, for an IPv6 VIP, an unsolicited neighbour
	// advertisement (to all nodes, with Override) is sent for a VIP, as
	// offsets from the moment lbd starts answering for it on an
	// interface, or from the interface coming back up. The repeats reach neighbours that missed the first,
	// e.g. behind a switch port that was still coming up. Default 0, 1 s,
	// 2 s.
	Gratuitous []time.Duration
	// Recheck is how often each interface with VIPs is looked up again:
	// to open its socket once the interface exists, to notice that it was
	// re-created or changed its MAC (reopen, announce again) or came back
	// up (announce again). Default DefaultRecheck.
	Recheck time.Duration
}

// State says how far the announcer got on one interface.
type State int

const (
	// Failed: a socket the VIPs need is not open, or (IPv6) a multicast
	// group could not be joined; Err says why (no such interface, no
	// Ethernet address, socket error). The interface is looked up again
	// every Recheck. A socket that did open (the other family's) keeps
	// answering meanwhile.
	Failed State = iota
	// Down: the sockets are open but the interface is down or has no
	// carrier; gratuitous ARP is sent when it comes up.
	Down
	// Answering: lbd answers ARP and neighbour solicitations for the VIPs
	// on this interface.
	Answering
	// Standby: the sockets are open for addresses this box may take over
	// (a failover pair's backup), so that it announces them at once;
	// nothing is answered yet.
	Standby
)

func (s State) String() string {
	switch s {
	case Failed:
		return "failed"
	case Down:
		return "down"
	case Answering:
		return "answering"
	case Standby:
		return "standby"
	}
	return "unknown"
}

// InterfaceStatus is what the announcer does on one interface.
type InterfaceStatus struct {
	Interface string
	// HardwareAddr is the MAC that replies carry; nil while the
	// interface cannot be used at all.
	HardwareAddr net.HardwareAddr
	// VIPs are the addresses lbd answers for on this interface (once
	// State is Answering), sorted, IPv4 first.
	VIPs  []netip.Addr
	State State
	// Err says why the state is not Answering; nil when it is.
	Err error
}

// Announcer answers ARP and NDP for the VIPs it was last given by Set. The
// zero value is not usable; call New.
type Announcer struct {
	log        *slog.Logger
	gratuitous []time.Duration
	recheck    time.Duration

	// wake has one slot: Set changed want since Run last looked.
	wake chan struct{}

	mu      sync.Mutex
	want    map[string][]netip.Addr
	standby map[string][]netip.Addr
	links   map[string]*link // written only by Run's goroutine
	running bool
}

// New returns an Announcer that answers nothing until Set and Run.
func New(opts Options) *Announcer {
	a := &Announcer{
		log:        cmp.Or(opts.Logger, slog.Default()),
		gratuitous: slices.Clone(opts.Gratuitous),
		recheck:    cmp.Or(opts.Recheck, DefaultRecheck),
		wake:       make(chan struct{}, 1),
		want:       map[string][]netip.Addr{},
		standby:    map[string][]netip.Addr{},
		links:      map[string]*link{},
	}
	if len(a.gratuitous) == 0 {
		a.gratuitous = []time.Duration{0, time.Second, 2 * time.Second}
	}
	for i, d := range a.gratuitous {
		a.gratuitous[i] = max(d, 0)
	}
	slices.Sort(a.gratuitous)
	if a.recheck < 0 {
		a.recheck = DefaultRecheck
	}
	return a
}

// Set replaces the complete desired set: interface name → VIPs to answer
// for on it, ARP for IPv4 ones and NDP for IPv6 ones. It only records the
// set and wakes Run, so it is cheap and never blocks; calling it again
// with the same set does nothing (no gratuitous ARP for VIPs already
// announced). Interfaces that are missing from vips, or have no VIP, get
// their sockets closed; so does a family without VIPs on an interface,
// which leaves its multicast groups. Addresses that cannot be a VIP
// (invalid, unspecified, multicast) are ignored. Set may be called before
// Run; the set then applies when Run starts.
func (a *Announcer) Set(vips map[string][]netip.Addr) { a.replace(&a.want, vips) }

// Standby replaces the addresses this box may have to announce at short
// notice (a failover pair's backup: what it announces as master): their
// interfaces' sockets stay open, and IPv6 ones' multicast groups joined,
// so that taking over (Set) announces at once instead of opening them
// first. Nothing is answered or announced for them until Set has them.
func (a *Announcer) Standby(vips map[string][]netip.Addr) { a.replace(&a.standby, vips) }

// replace sets *m (want or standby) to vips and wakes Run if it changed.
func (a *Announcer) replace(m *map[string][]netip.Addr, vips map[string][]netip.Addr) {
	next := a.normalize(vips)
	a.mu.Lock()
	changed := !maps.EqualFunc(*m, next, slices.Equal)
	if changed {
		*m = next
	}
	a.mu.Unlock()
	if changed {
		select {
		case a.wake <- struct{}{}:
		default: // Run has a wake-up pending and will read them then.
		}
	}
}

// normalize copies vips, IPv4-mapped addresses unmapped, zones dropped,
// sorted and deduplicated, dropping interfaces left without any: the
// caller may reuse its map.
func (a *Announcer) normalize(vips map[string][]netip.Addr) map[string][]netip.Addr {
	want := make(map[string][]netip.Addr, len(vips))
	for name, addrs := range vips {
		var keep []netip.Addr
		for _, addr := range addrs {
			if addr = addr.Unmap().WithZone(""); !addr.IsValid() || addr.IsUnspecified() || addr.IsMulticast() {
				a.log.Debug("not announcing an address that cannot be a VIP", "interface", name, "vip", addr)
				continue
			}
			keep = append(keep, addr)
		}
		if len(keep) == 0 {
			continue
		}
		slices.SortFunc(keep, netip.Addr.Compare)
		want[name] = slices.Compact(keep)
	}
	return want
}

// Again sends every announced address's gratuitous ARP and unsolicited
// neighbour advertisements once more, on the usual schedule, as when it
// was first announced: neighbours that learned another box for it (two
// masters of a failover pair during a partition) are corrected. It never
// blocks.
func (a *Announcer) Again() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.links {
		select {
		case l.again <- struct{}{}:
		default:
		}
	}
}

// Run answers ARP and NDP and sends gratuitous ARP and unsolicited
// neighbour advertisements until ctx ends, then closes
// every socket, waits for all its goroutines and returns nil. Failures on
// one interface are reported through Status and the log and retried; they
// never end Run. Run may be called once; a second call returns an error.
func (a *Announcer) Run(ctx context.Context) error {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return errors.New("announce: Run called more than once")
	}
	a.running = true
	a.mu.Unlock()

	var wg sync.WaitGroup
	defer func() {
		a.mu.Lock()
		links := slices.Collect(maps.Values(a.links))
		a.mu.Unlock()
		a.stop(links)
		wg.Wait()
	}()
	for {
		a.reconcile(ctx, &wg)
		select {
		case <-ctx.Done():
			return nil
		case <-a.wake:
		}
	}
}

// reconcile starts a link for each interface that gained VIPs, hands every
// link its current VIPs, and stops (closing its sockets) each link whose
// interface has none left.
func (a *Announcer) reconcile(ctx context.Context, wg *sync.WaitGroup) {
	var stop []*link
	a.mu.Lock()
	for name, l := range a.links {
		_, want := a.want[name]
		_, standby := a.standby[name]
		if !want && !standby {
			stop = append(stop, l)
		}
	}
	for _, name := range slices.Collect(maps.Keys(a.want)) {
		a.ensureLink(ctx, wg, name)
	}
	for _, name := range slices.Collect(maps.Keys(a.standby)) {
		a.ensureLink(ctx, wg, name)
	}
	a.mu.Unlock()
	a.stop(stop)
}

// ensureLink starts name's link if it has none and hands it its addresses;
// under a.mu.
func (a *Announcer) ensureLink(ctx context.Context, wg *sync.WaitGroup, name string) {
	l, ok := a.links[name]
	if !ok {
		lctx, cancel := context.WithCancel(ctx)
		l = newLink(name, a.log.With("interface", name), a.gratuitous, a.recheck, cancel)
		a.links[name] = l
		wg.Go(func() { l.run(lctx) })
	}
	l.set(a.want[name], a.standby[name])
}

// stop stops links and waits until their sockets are closed, then drops
// them from Status. It waits outside the lock so that Status does not
// stall, and so that a VIP re-added right away gets a fresh socket rather
// than the closing one.
func (a *Announcer) stop(links []*link) {
	for _, l := range links {
		l.set(nil, nil) // stop answering at once
		l.cancel()
	}
	for _, l := range links {
		<-l.done
	}
	a.mu.Lock()
	for _, l := range links {
		if a.links[l.name] == l {
			delete(a.links, l.name)
		}
	}
	a.mu.Unlock()
}

// Status reports, per interface with VIPs and sorted by name, what is
// being answered and any interface error. Interfaces given to Set but not
// yet picked up by Run are absent.
func (a *Announcer) Status() []InterfaceStatus {
	a.mu.Lock()
	links := slices.Collect(maps.Values(a.links))
	a.mu.Unlock()
	out := make([]InterfaceStatus, 0, len(links))
	for _, l := range links {
		out = append(out, l.status())
	}
	slices.SortFunc(out, func(x, y InterfaceStatus) int { return cmp.Compare(x.Interface, y.Interface) })
	return out
}
