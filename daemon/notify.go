package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"

	"github.com/lbdproject/lbd/dataplane"
)

// notifier tells systemd (Type=notify) when lbd is ready and what it is
// doing. Outside systemd (no NOTIFY_SOCKET) every call does nothing.
type notifier struct {
	log   *slog.Logger
	ready sync.Once
	// rejected is why the newest configuration was refused, for the
	// status line until one is taken into force; "" when none was.
	rejected atomic.Pointer[string]
}

// setRejected notes (or with "" clears) a refused configuration for the
// status lines that follow.
func (n *notifier) setRejected(why string) { n.rejected.Store(&why) }

// refused says at once that a configuration was refused while an older
// one is in force.
func (n *notifier) refused() {
	if p := n.rejected.Load(); p != nil && *p != "" {
		n.send("STATUS=configuration refused, the last good one stays in force: " + *p)
	}
}

// invalidAtStart tells systemd lbd is up although no configuration was
// valid yet: failing the start would only restart lbd into the same
// files, again and again, while the admin can fix them and lbd takes the
// first valid edit. The kernel is left as it was meanwhile.
func (n *notifier) invalidAtStart() {
	why := ""
	if p := n.rejected.Load(); p != nil {
		why = *p
	}
	n.ready.Do(func() { n.send(sd.SdNotifyReady) })
	n.send("STATUS=invalid configuration, nothing applied: " + why)
}

func (n *notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Debug("sd_notify failed", "state", state, "error", err)
	}
}

// onSync is a dataplane hook: READY=1 after the first sync that ran (every
// source had reported); per-service kernel errors do not hold readiness
// back, they are in the status line and the logs.
func (n *notifier) onSync(res dataplane.SyncResult) {
	if res.Waiting {
		n.send("STATUS=waiting for every source's first answer")
		return
	}
	n.ready.Do(func() { n.send(sd.SdNotifyReady) })
	status := fmt.Sprintf("STATUS=%d virtual servers; last sync %s", res.Services, res.Start.Format(time.TimeOnly))
	switch {
	case res.Err != nil:
		status += ": failed, retrying"
	case res.Held.Active():
		status += ": deletions held by the safety valve"
	}
	if p := n.rejected.Load(); p != nil && *p != "" {
		status += "; configuration refused: " + *p
	}
	n.send(status)
}

func (n *notifier) stopping() { n.send(sd.SdNotifyStopping) }

// readyGrace is how long READY=1 waits for the first sync. A source that
// does not answer at boot (Consul down) must not make systemd kill lbd at
// TimeoutStartSec and restart it in a loop: the kernel keeps serving what
// it holds, and lbd syncs as soon as the source answers.
const readyGrace = 60 * time.Second

// readyAfterGrace sends READY=1 after grace if no sync ran by then.
func (n *notifier) readyAfterGrace(ctx context.Context, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		n.ready.Do(func() {
			n.log.Warn("no sync yet: a source has not answered; telling systemd lbd is ready anyway (the kernel keeps what it holds)", "waited", grace)
			n.send(sd.SdNotifyReady)
			n.send("STATUS=ready, but waiting for every source's first answer before the first sync")
		})
	}
}

// syncLoop is the dataplane as the watchdog sees it.
type syncLoop interface {
	SyncingSince() (time.Time, bool)
}

// watchdog feeds systemd's watchdog (WatchdogSec) at half its period while
// the sync loop is alive: a sync running for longer than the whole period
// means the loop hangs (a stuck netlink call, say), and then lbd stops
// feeding it so that systemd restarts it.
func watchdog(ctx context.Context, log *slog.Logger, n *notifier, loop syncLoop) {
	period, err := sd.SdWatchdogEnabled(false)
	if err != nil || period == 0 {
		return
	}
	t := time.NewTicker(period / 2)
	defer t.Stop()
	hung := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if start, busy := loop.SyncingSince(); busy && now.Sub(start) > period {
				if !hung {
					log.Error("a sync has been running too long; no longer feeding the systemd watchdog", "running_for", now.Sub(start).Round(time.Second))
				}
				hung = true
				continue
			}
			hung = false
			n.send(sd.SdNotifyWatchdog)
		}
	}
}
