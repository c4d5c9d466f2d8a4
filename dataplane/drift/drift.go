// Package drift notices, as it happens, the drift of lbd's dataplane that
// the kernel tells about, so that a full sync repairs it within
// min_sync_period instead of at the next sync_period:
//
//   - rtnetlink: lbd's link deleted or set down, a VIP lbd binds removed
//     from it, an address it does not bind added to it;
//   - nftables (iptables-nft): a transaction of another process that
//     changes lbd's LBD-* chains, deletes a jump to them, or inserts a rule
//     ahead of a jump that must come first.
//
// lbd's own writes are told apart precisely, never by timing: an address
// event that leaves the link as lbd's syncs expect is lbd's (the dataplane
// says what it expects), and an nftables transaction is lbd's when the
// NEWGEN that ends it names one of lbd's iptables-restore children
// (iptables.Children). IPVS, ipsets, iptables-legacy and sysctls send no
// notifications: the periodic full sync keeps repairing those.
package drift

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// Options configures Watch.
type Options struct {
	// Link is lbd's dummy interface ([dataplane] interface).
	Link string
	// Expect reports whether lbd's own syncs account for address a being
	// bound to Link (bound) or not: Dataplane.ExpectsVIP. Nil: only the
	// link itself is watched.
	Expect func(a netip.Addr, bound bool) bool
	// Tables holds lbd's iptables tables by family (4, 6), as
	// desired.Tables returns them, when the rules live in nftables
	// (iptables-nft); nil with iptables-legacy, whose rules tell nothing.
	Tables map[int][]desired.Table
	// Own reports whether a process is one of lbd's own iptables-restore
	// children (iptables.Children.Started); their transactions are not
	// drift.
	Own func(pid int) bool
	// OnDrift is told what was seen, one line for the log; it is called
	// from Watch's goroutine at once for the first drift, then at most
	// once per quiet period with the rest, and must not block.
	OnDrift func(what string)
	Logger  *slog.Logger
}

// kind is what a finding is about.
type kind uint8

const (
	rulesChanged kind = iota + 1 // another process changed lbd's rules
	addrRemoved                  // a VIP lbd binds was removed from its link
	addrAdded                    // an address lbd does not bind was added
	linkGone                     // lbd's link was deleted or renamed
	linkDown                     // lbd's link was set down
	missed                       // notifications were lost: anything may have changed
)

// finding is one piece of drift, reported as one log line.
type finding struct {
	kind kind
	// more counts further changes of the same kind folded into this one.
	more  int
	rules change // rulesChanged
	pid   int    // rulesChanged: the committing process, 0 if unnamed
	proc  string
	link  string     // addr*, link*
	addr  netip.Addr // addr*: the lowest address
	// source names the subscription that missed notifications, and why.
	source string
}

func (f finding) String() string {
	more := ""
	if f.more > 0 {
		more = fmt.Sprintf(" (and %d more)", f.more)
	}
	switch f.kind {
	case rulesChanged:
		return f.rules.describe(f.more, f.pid, f.proc)
	case addrRemoved:
		return fmt.Sprintf("addresses: VIP %s removed from %s%s", f.addr, f.link, more)
	case addrAdded:
		return fmt.Sprintf("addresses: %s added to %s, which lbd does not bind%s", f.addr, f.link, more)
	case linkGone:
		return fmt.Sprintf("addresses: link %s deleted", f.link)
	case linkDown:
		return fmt.Sprintf("addresses: link %s set down", f.link)
	case missed:
		return fmt.Sprintf("%s; what changed meanwhile is unknown", f.source)
	}
	return "unknown drift"
}

// reporter hands findings to OnDrift: the first at once, those that
// follow within quiet of a report together after it, so that a script
// rewriting the firewall rule by rule makes a few log lines, not one per
// rule. add never blocks.
type reporter struct {
	mu    sync.Mutex
	first finding
	n     int
	wake  chan struct{}
}

func newReporter() *reporter { return &reporter{wake: make(chan struct{}, 1)} }

func (r *reporter) add(f finding) {
	r.mu.Lock()
	if r.n == 0 {
		r.first = f
	}
	r.n++
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// take returns what was added since the last take, as one line; "" when
// nothing was.
func (r *reporter) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, n := r.first, r.n
	r.first, r.n = finding{}, 0
	switch n {
	case 0:
		return ""
	case 1:
		return f.String()
	}
	return fmt.Sprintf("%s; and %d more", f, n-1)
}

// run calls onDrift until ctx ends.
func (r *reporter) run(ctx context.Context, quiet time.Duration, onDrift func(string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		if what := r.take(); what != "" {
			onDrift(what)
		}
		t := time.NewTimer(quiet)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
