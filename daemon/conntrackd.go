package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha/conntrackd"
	"github.com/lbdproject/lbd/status"
)

// pairConntrack runs conntrackd for the pair and orders its commands
// around the failover states the Pair hands over: a box becoming master
// commits the peer's replicated entries before the dataplane binds the
// addresses (a reply that found no entry would be reset), then takes the
// lead; a box leaving master asks the peer for its entries.
type pairConntrack struct {
	d   *daemon
	cfg config.Conntrackd
	set func(desired.Serving, []desired.Floating) // the dataplane's SetFailover

	mu      sync.Mutex
	ct      *conntrackd.Daemon // nil until the link's address is known
	cmds    ctCommands         // ct's, once it is set
	waiting string
	latest  *failoverState
	master  bool // the latest applied state binds addresses
	wake    chan struct{}
}

type failoverState struct {
	serving  desired.Serving
	floating []desired.Floating
}

// commitTimeout bounds how long a new master waits for the commit before
// binding its addresses anyway.
const commitTimeout = 3 * time.Second

// ctCommands are conntrackd's transition commands (conntrackd.Daemon's).
type ctCommands interface {
	Commit(context.Context) error
	Lead(context.Context) error
	Follow(context.Context) error
}

func newPairConntrack(d *daemon, cfg config.Conntrackd) *pairConntrack {
	return &pairConntrack{d: d, cfg: cfg, set: d.dp.SetFailover, waiting: "starting", wake: make(chan struct{}, 1)}
}

// start runs conntrackd and the failover sequence until ctx ends.
func (p *pairConntrack) start(ctx context.Context) {
	p.d.wg.Go(func() { p.run(ctx) })
	p.d.wg.Go(func() { p.sequence(ctx) })
}

// failover is the Pair's OnFailover: it must not block.
func (p *pairConntrack) failover(serving desired.Serving, fl []desired.Floating) {
	p.mu.Lock()
	p.latest = &failoverState{serving, fl}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pairConntrack) commands() ctCommands {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmds
}

// run finds this box's address on the link (retrying while it has none),
// then supervises conntrackd.
func (p *pairConntrack) run(ctx context.Context) {
	local := p.cfg.Address
	for !local.IsValid() {
		a, err := linkAddress(p.cfg.Interface, p.cfg.Peer.Is4())
		if err == nil {
			local = a
			break
		}
		p.mu.Lock()
		p.waiting = err.Error()
		p.mu.Unlock()
		p.d.log.Error("conntrackd cannot start; masqueraded connections are not replicated, retrying", "error", err, "retry_in", "5s")
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
	ct := conntrackd.New(conntrackd.Options{
		Program: p.cfg.Program,
		Settings: conntrackd.Settings{Interface: p.cfg.Interface, Local: local, Peer: p.cfg.Peer, Port: p.cfg.Port,
			Dir: filepath.Join(p.d.opts.StateDir, "conntrackd")},
		Logger: p.d.log,
		// A new conntrackd's external cache is empty: a backup asks the
		// peer for its entries at once, not at the next transition.
		OnStarted: func() {
			p.mu.Lock()
			master := p.master
			p.mu.Unlock()
			if !master {
				p.command(ctx, p.commands().Follow)
			}
		},
	})
	p.mu.Lock()
	p.ct, p.cmds, p.waiting = ct, ct, ""
	p.mu.Unlock()
	if err := ct.Run(ctx); err != nil {
		p.d.log.Error("conntrackd cannot run; masqueraded connections are not replicated", "error", err)
	}
}

// linkAddress is the first address of the family on the named link.
func linkAddress(name string, v4 bool) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("conntrackd's link %s: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("conntrackd's link %s: %w", name, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ip, _ := netip.AddrFromSlice(n.IP)
			if ip = ip.Unmap(); ip.Is4() == v4 && !ip.IsLinkLocalUnicast() {
				return ip, nil
			}
		}
	}
	return netip.Addr{}, fmt.Errorf("conntrackd's link %s has no address of the peer's family; expected one, or [ha.conntrackd] address", name)
}

// sequence applies the latest failover state, with conntrackd's commands
// around it, one state at a time.
func (p *pairConntrack) sequence(ctx context.Context) {
	var active map[netip.Prefix]bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		st := p.latest
		p.mu.Unlock()
		now := map[netip.Prefix]bool{}
		for _, f := range st.floating {
			if !f.Held {
				now[f.Prefix] = true
			}
		}
		gained, lost := changes(active, now)
		ct := p.commands()
		if gained && ct != nil {
			cctx, cancel := context.WithTimeout(ctx, commitTimeout)
			if err := ct.Commit(cctx); err != nil {
				p.d.log.Warn("binding the pair's addresses without the peer's masqueraded connections", "error", err)
			}
			cancel()
		}
		p.set(st.serving, st.floating)
		active = now
		p.mu.Lock()
		p.master = len(now) > 0
		p.mu.Unlock()
		switch {
		case ct == nil:
		case gained:
			p.command(ctx, ct.Lead)
		case lost:
			p.command(ctx, ct.Follow)
		}
	}
}

func (p *pairConntrack) command(ctx context.Context, f func(context.Context) error) {
	if err := f(ctx); err != nil {
		p.d.log.Warn("conntrackd's transition commands failed", "error", err)
	}
}

// changes reports whether now holds an address that was did not, and
// the reverse.
func changes(was, now map[netip.Prefix]bool) (gained, lost bool) {
	for a := range now {
		gained = gained || !was[a]
	}
	for a := range was {
		lost = lost || !now[a]
	}
	return gained, lost
}

// status fills s's conntrackd part.
func (p *pairConntrack) status(s *status.Snapshot) {
	p.mu.Lock()
	ct, waiting := p.ct, p.waiting
	p.mu.Unlock()
	out := &status.Conntrackd{Waiting: waiting}
	if ct != nil {
		st := ct.Status()
		out = &status.Conntrackd{Running: st.Running, PID: st.PID, Since: st.Started, Restarts: st.Restarts, LastExit: st.LastExit,
			LastCommand: st.LastCommand, LastCommandAt: st.LastCommandAt, LastCommandError: st.LastCommandError}
	}
	s.Conntrackd = out
}
