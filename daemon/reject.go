package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/status"
)

// rejection is a configuration lbd refused after it had loaded.
type rejection struct {
	err error
	at  time.Time
}

// reportingLoad wraps the file source's Load so that the main loop hears
// of every refused configuration. A panic while decoding the files (a bug
// lbd must survive: the files are read again after every restart) refuses
// them like an invalid edit.
func reportingLoad(log *slog.Logger, rejects chan error, load func(string) (*config.Config, error)) func(string) (*config.Config, error) {
	return func(path string) (cfg *config.Config, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("internal error while reading the configuration; it is refused", "panic", r, "stack", string(debug.Stack()))
				cfg, err = nil, fmt.Errorf("internal error while reading the configuration (a bug in lbd, please report it): %v", r)
			}
			if err != nil {
				// Only the file source's goroutine sends: after the drain
				// the send cannot block, and the loop reads the latest.
				select {
				case <-rejects:
				default:
				}
				rejects <- err
			}
		}()
		return load(path)
	}
}

// rejected handles a configuration the file source refused (it logged
// the errors). Before any configuration was valid, lbd still answers: it
// serves lbd status on the default socket and tells systemd it is ready,
// with what is wrong as its status, and leaves the kernel untouched until
// the first valid edit.
func (d *daemon) rejected(ctx context.Context, err error) {
	d.m.ObserveConfigLoad(false, time.Now())
	d.notify.setRejected(summary(err))
	if d.dp != nil {
		d.notify.refused()
		return
	}
	d.startEarlyStatus(ctx)
	d.notify.invalidAtStart()
}

// refuse rejects a configuration that loaded but cannot be applied: the
// last good one stays in force, as with a validation error.
func (d *daemon) refuse(ctx context.Context, err error) {
	d.log.Error("configuration refused; the last good one stays in force", "error", err)
	d.rejection.Store(&rejection{err: err, at: time.Now()})
	d.rejected(ctx, err)
}

// accepted notes that the source's configuration is in force.
func (d *daemon) accepted(st file.Status) {
	d.inForce.Store(&st)
	d.rejection.Store(nil)
	d.notify.setRejected("")
}

// configStatus is what status shows of the configuration: the one in
// force, and why newer files were refused.
func (d *daemon) configStatus() file.Status {
	st := d.src.Status()
	if in := d.inForce.Load(); in != nil {
		st.Files, st.Hash, st.Loaded = in.Files, in.Hash, in.Loaded
	}
	if r := d.rejection.Load(); r != nil && st.Err == nil {
		st.Err, st.ErrTime = r.err, r.at
	}
	return st
}

// summary is an error's first line, short enough for systemd's status
// line, with a count of the lines left out.
func summary(err error) string {
	const maxLen = 200
	lines := strings.Split(strings.TrimSpace(err.Error()), "\n")
	s := lines[0]
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	if len(lines) > 1 {
		s += fmt.Sprintf(" (and %d more lines: lbd status)", len(lines)-1)
	}
	return s
}

// earlyStatus is the status socket served while no configuration has
// been valid; the first valid one replaces it by its own socket.
type earlyStatus struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (d *daemon) startEarlyStatus(ctx context.Context) {
	if d.early != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	e := &earlyStatus{cancel: cancel, done: make(chan struct{})}
	d.early = e
	path := config.Defaults().Status.Socket
	go func() {
		defer close(e.done)
		if err := status.Serve(ctx, path, d.statusBeforeStart); err != nil {
			d.log.Error("status socket unavailable; lbd status will not answer", "error", err)
		}
	}()
}

// stopEarlyStatus waits until the early socket is gone, so that it does
// not remove the socket the daemon serves next at the same path.
func (d *daemon) stopEarlyStatus() {
	if d.early == nil {
		return
	}
	d.early.cancel()
	<-d.early.done
	d.early = nil
}

// statusBeforeStart is lbd status while no configuration has been valid.
func (d *daemon) statusBeforeStart() status.Snapshot {
	s := status.Build(d.opts.Version, time.Now(), d.configStatus(), dataplane.View{}, nil, nil)
	s.Sync.Waiting = true
	s.Sync.Error = "not started: no valid configuration yet; the kernel is left as it was"
	return s
}
