package daemon

import (
	"context"
	"time"

	"github.com/lbdproject/lbd/dataplane/connsync"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/syncd"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/lvs"
)

// connSync sends this box's IPVS connections to the peer's backup sync
// daemon when the peer takes over from it: the kernel's master daemon
// sends a connection only as its packets pass and flushes its buffer
// every 2 s, so a connection opened just before a handover, or one idle
// since the peer (re)started, would be unknown to the new master and
// reset there.
type connSync struct {
	d    *daemon
	wake chan string // why, to the sending goroutine
}

// planned sends the connections as a planned stop begins, before the
// instances hand over, if this box is master of any.
func (c *connSync) planned(ctx context.Context, master bool) {
	if master {
		c.send(ctx, "planned stop")
	}
}

// sendTimeout bounds one send: at a planned stop the handover waits
// for it.
const sendTimeout = 3 * time.Second

func newConnSync(d *daemon) *connSync {
	return &connSync{d: d, wake: make(chan string, 1)}
}

// run sends when asked, one send at a time, until ctx ends.
func (c *connSync) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case why := <-c.wake:
			c.send(ctx, why)
		}
	}
}

// event is a Pair's OnEvent: a master giving way (to a preempting or
// healed peer, or on a fault) sends its connections as it gives its
// addresses up. It never blocks.
func (c *connSync) event(e vrrp.Event) {
	if e.From != vrrp.Master || (e.To != vrrp.Backup && e.To != vrrp.Fault) {
		return
	}
	c.ask("leaving MASTER (" + e.Cause.String() + ")")
}

// holding is a Pair's OnHolding: a master stepping down make-before-break
// sends its connections at once, while it still holds the addresses, so
// that the peer knows the idle ones before their packets reach it; event
// sends again at the release, for the ones opened meanwhile.
func (c *connSync) holding(e vrrp.Event) {
	c.ask("stepping down from MASTER (" + e.Cause.String() + "), the addresses still held")
}

func (c *connSync) ask(why string) {
	select {
	case c.wake <- why:
	default: // a send is pending: it reads the table when it runs
	}
}

// send reads the connection table and sends what belongs to lbd's
// virtual servers to the sync group, as the master daemon would.
func (c *connSync) send(ctx context.Context, why string) {
	st, ok := c.d.dp.Applied()
	if !ok {
		return
	}
	var master *syncd.Daemon
	for i, sd := range st.SyncDaemons {
		if sd.Role == syncd.Master {
			master = &st.SyncDaemons[i]
		}
	}
	if master == nil {
		return // no [ha.ipvs_sync]
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	start := time.Now()
	s, err := connsync.Dial("", *master, connsync.Options{})
	if err != nil {
		c.d.log.Warn("cannot send this box's connections to the peer", "why", why, "error", err)
		return
	}
	defer s.Close()
	stats, err := s.SendTable(ctx, connsync.ByVirtual(syncServices(st)))
	args := []any{"why", why, "sent", stats.Sent, "templates", stats.Templates,
		"messages", stats.Messages, "bytes", stats.Bytes, "took", time.Since(start).Round(time.Millisecond)}
	if err != nil {
		c.d.log.Warn("sending this box's connections to the peer's sync daemon failed", append(args, "error", err)...)
		return
	}
	c.d.log.Info("connections sent to the peer's sync daemon", args...)
}

// syncServices is what the sender needs of lbd's virtual servers.
func syncServices(st desired.State) map[lvs.Key]connsync.Service {
	out := make(map[lvs.Key]connsync.Service, len(st.Services))
	for _, vs := range st.Services {
		s := connsync.Service{}
		if len(vs.Dests) > 0 {
			s.Forward = vs.Dests[0].Forward().Method
		}
		if vs.Flags&desired.FlagPersistent != 0 {
			s.Persistence = time.Duration(vs.Timeout) * time.Second
		}
		out[vs.Key] = s
	}
	return out
}
