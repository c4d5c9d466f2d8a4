package consul

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lbdproject/lbd/config"
)

// ReadOnce follows Consul until it has answered every query once, as the
// daemon waits for before its first sync, or until wait has passed: `lbd
// plan --diff` shows what that first sync would do with this answer.
func ReadOnce(ctx context.Context, log *slog.Logger, cfg config.Consul, queries []Query, wait time.Duration) (Snapshot, error) {
	client, err := NewClient(cfg)
	if err != nil {
		return Snapshot{}, fmt.Errorf("consul: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w := New(Options{Client: client, Logger: log.With("source", "consul"), VirtualServiceTag: cfg.VirtualServices.Tag})
	w.SetQueries(queries)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	var last Snapshot
	// Updates closes when Run returns: at the deadline, or at once if it
	// cannot run.
	for snap := range w.Updates() {
		if snap.Synced {
			cancel()
			<-runErr
			if snap.Err != "" {
				log.Warn("consul answered with problems", "problems", snap.Err)
			}
			return snap, nil
		}
		last = snap
	}
	if err := <-runErr; err != nil {
		return Snapshot{}, fmt.Errorf("consul: %w", err)
	}
	why := last.Err
	if why == "" {
		why = w.Status().LastError
	}
	if why == "" {
		why = "no complete answer yet"
	}
	return Snapshot{}, fmt.Errorf("consul at %s did not answer within %v (%s)", cfg.Address, wait, why)
}
