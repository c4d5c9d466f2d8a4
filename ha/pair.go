package ha

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha/vrrp"
)

// Socket is a VRRP socket (vrrp.Socket in lbd run).
type Socket interface {
	vrrp.Conn
	// Source is the address adverts go out from on the link.
	Source() (netip.Addr, error)
}

// Options configure a Pair.
type Options struct {
	Logger *slog.Logger
	// Listen opens the VRRP socket of a link.
	Listen func(vrrp.Link) (Socket, error)
	// OnFailover is handed what the dataplane serves after every
	// transition, and when Run returns (everything given up).
	OnFailover func(desired.Serving, []desired.Floating)
	// OnEvent, when set, is called on every transition (notify programs,
	// metrics), from the Pair's goroutine.
	OnEvent func(vrrp.Event)
	// OnHolding, when set, is called when an instance leaves master but
	// keeps its addresses until the peer has taken over (a preemption, a
	// healed partition, a tracked check failing): its transition comes to
	// OnEvent when it gives them up.
	OnHolding func(vrrp.Event)
	// OnAnnounce, when set, asks for the master's addresses to be
	// announced again (gratuitous ARP, unsolicited neighbour
	// advertisements): a partition healed, and neighbours may have learned
	// the other box. It must not block.
	OnAnnounce func()
	// Links, when set, follows the state of the named interfaces: it calls
	// up for each at once and on every change, until ctx ends. An
	// instance whose interface or a tracked one is down is in FAULT.
	Links func(ctx context.Context, names []string, up func(name string, up bool)) error
	// Retry is how long to wait before opening the sockets again after a
	// failure (an interface missing or without an address); 5 s if 0.
	Retry time.Duration
}

// Pair runs the configuration's VRRP instances.
type Pair struct {
	plan plan
	cfg  map[string]*config.VRRPInstance
	opts Options

	mu     sync.Mutex // guards runner, runCtx, master, openErr
	runner *vrrp.Runner
	runCtx context.Context // Run's, for SetFault
	master map[string]bool
	faults *faults
	// openErr is why the sockets could not be opened yet.
	openErr error
}

// New returns a Pair for cfg's instances; Run runs them.
func New(cfg *config.Config, opts Options) *Pair {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Retry <= 0 {
		opts.Retry = 5 * time.Second
	}
	p := &Pair{plan: newPlan(cfg), cfg: map[string]*config.VRRPInstance{}, opts: opts, master: map[string]bool{}, faults: newFaults()}
	for i := range cfg.VRRP {
		p.cfg[cfg.VRRP[i].Name] = &cfg.VRRP[i]
	}
	return p
}

// Failover is what the dataplane serves now; before Run, and after it
// returns, every carried VIP and floating address is held: a box starts
// as backup and gives everything up when it stops.
func (p *Pair) Failover() (desired.Serving, []desired.Floating) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.plan.failover(p.master)
}

// Status returns each instance's state, and why the sockets could not be
// opened (nil once they are).
func (p *Pair) Status() ([]vrrp.Status, error) {
	p.mu.Lock()
	r, err := p.runner, p.openErr
	p.mu.Unlock()
	if r == nil {
		return nil, err
	}
	return r.Status(), nil
}

// Run opens the sockets (retrying until it can), runs the instances until
// ctx ends, then stops them: masters send priority 0, and OnFailover is
// handed the state with everything given up before Run returns.
func (p *Pair) Run(ctx context.Context) error {
	socks, err := p.openRetrying(ctx)
	if err != nil {
		return nil // ctx ended
	}
	groups := p.withSources(socks)
	r, err := vrrp.New(vrrp.Options{
		Groups:    groups,
		Dial:      func(l vrrp.Link) (vrrp.Conn, error) { return socks[l], nil },
		OnEvent:   p.onEvent,
		OnHolding: p.opts.OnHolding,
		OnAnnounce: func(string) {
			if p.opts.OnAnnounce != nil {
				p.opts.OnAnnounce()
			}
		},
		Logger: p.opts.Logger,
	})
	if err != nil {
		for _, s := range socks {
			s.Close()
		}
		return fmt.Errorf("VRRP: %w", err)
	}
	p.mu.Lock()
	p.runner, p.runCtx = r, ctx
	p.mu.Unlock()
	tctx, stopTracking := context.WithCancel(ctx)
	// Faults the daemon set before the instances started.
	wg0 := sync.WaitGroup{}
	wg0.Go(func() { p.applyFaults(tctx, r) })
	var wg sync.WaitGroup
	if p.opts.Links != nil {
		wg.Go(func() { p.track(tctx, r) })
	}
	err = r.Run(ctx)
	stopTracking()
	wg.Wait()
	wg0.Wait()
	return err
}

// openRetrying opens one socket per link, retrying every Retry; it fails
// only when ctx ends.
func (p *Pair) openRetrying(ctx context.Context) (map[vrrp.Link]Socket, error) {
	for {
		socks, err := p.open()
		p.mu.Lock()
		p.openErr = err
		p.mu.Unlock()
		if err == nil {
			return socks, nil
		}
		p.opts.Logger.Error("VRRP cannot start; this box holds none of the pair's addresses, retrying",
			"error", err, "retry_in", p.opts.Retry)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(p.opts.Retry):
		}
	}
}

func (p *Pair) open() (map[vrrp.Link]Socket, error) {
	socks := map[vrrp.Link]Socket{}
	for _, g := range p.plan.groups {
		for _, in := range g.Instances {
			if socks[in.Link] != nil {
				continue
			}
			s, err := p.opts.Listen(in.Link)
			if err == nil {
				_, err = s.Source()
				if err != nil {
					s.Close()
				}
			}
			if err != nil {
				for _, s := range socks {
					s.Close()
				}
				return nil, fmt.Errorf("VRRP instance %s on %s: %w", in.Name, in.Link.Interface, err)
			}
			socks[in.Link] = s
		}
	}
	return socks, nil
}

// withSources returns the plan's groups with each instance's source
// address: its unicast_source, else its link's.
func (p *Pair) withSources(socks map[vrrp.Link]Socket) []vrrp.GroupSpec {
	groups := make([]vrrp.GroupSpec, len(p.plan.groups))
	for i, g := range p.plan.groups {
		groups[i] = vrrp.GroupSpec{Name: g.Name}
		for _, in := range g.Instances {
			in.Params.Self = p.cfg[in.Name].UnicastSource
			if !in.Params.Self.IsValid() {
				in.Params.Self, _ = socks[in.Link].Source() // checked by open
			}
			groups[i].Instances = append(groups[i].Instances, in)
		}
	}
	return groups
}

func (p *Pair) onEvent(e vrrp.Event) {
	p.mu.Lock()
	p.master[e.Instance] = e.To == vrrp.Master
	serving, fl := p.plan.failover(p.master)
	p.mu.Unlock()
	if p.opts.OnFailover != nil {
		p.opts.OnFailover(serving, fl)
	}
	if p.opts.OnEvent != nil {
		p.opts.OnEvent(e)
	}
}

// track follows the instances' interfaces and sets their faults.
func (p *Pair) track(ctx context.Context, r *vrrp.Runner) {
	var names []string
	for _, name := range p.plan.order {
		names = appendNew(names, p.plan.track[name]...)
	}
	down := map[string]bool{}
	update := func(link string, up bool) {
		if known, was := down[link]; was && known == !up {
			return
		}
		down[link] = !up
		if !up {
			p.opts.Logger.Warn("tracked interface down", "interface", link)
		}
		p.setLink(link, up)
		p.applyFaults(ctx, r)
	}
	// Following links can fail (a netlink buffer overrun): start again,
	// which reads every link's state anew.
	for {
		err := p.opts.Links(ctx, names, update)
		if ctx.Err() != nil {
			return
		}
		p.opts.Logger.Warn("following interfaces for VRRP tracking failed; starting again", "error", err, "retry_in", p.opts.Retry)
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.opts.Retry):
		}
	}
}
