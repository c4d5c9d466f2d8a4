package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// ctRecorder records conntrackd's commands and the failover states
// applied, in one sequence.
type ctRecorder struct {
	mu     sync.Mutex
	seq    []string
	commit error
}

func (r *ctRecorder) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq = append(r.seq, s)
	if s == "commit" {
		return r.commit
	}
	return nil
}

func (r *ctRecorder) Commit(context.Context) error { return r.add("commit") }
func (r *ctRecorder) Lead(context.Context) error   { return r.add("lead") }
func (r *ctRecorder) Follow(context.Context) error { return r.add("follow") }

func (r *ctRecorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seq)
}

// TestConntrackSequence checks the order around each failover state: a
// new master commits before its addresses are bound, then leads; a box
// that gives addresses up follows after unbinding; nothing else moves
// conntrackd.
func TestConntrackSequence(t *testing.T) {
	inside := netip.MustParsePrefix("198.19.10.1/24")
	outside := netip.MustParsePrefix("198.18.2.10/24")
	fl := func(held ...bool) []desired.Floating {
		return []desired.Floating{{Prefix: outside, Link: "eth0", Held: held[0]}, {Prefix: inside, Link: "eth1", Held: held[1]}}
	}
	for _, tt := range []struct {
		name      string
		states    [][]desired.Floating
		commitErr error
		want      string
	}{
		{"backup at start", [][]desired.Floating{fl(true, true)}, nil, "set"},
		{"becomes master", [][]desired.Floating{fl(true, true), fl(false, false)}, nil, "set commit set lead"},
		{"commit fails, binds anyway", [][]desired.Floating{fl(false, false)}, errors.New("no socket"), "commit set lead"},
		{"master, then backup", [][]desired.Floating{fl(false, false), fl(true, true)}, nil, "commit set lead set follow"},
		{"same state again", [][]desired.Floating{fl(false, false), fl(false, false)}, nil, "commit set lead set"},
		{"one instance moves each way", [][]desired.Floating{fl(false, true), fl(true, false)}, nil, "commit set lead commit set lead"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &ctRecorder{commit: tt.commitErr}
			p := &pairConntrack{d: &daemon{log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cmds: rec, wake: make(chan struct{}, 1)}
			p.set = func(desired.Serving, []desired.Floating) { rec.add("set") }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); p.sequence(ctx) }()
			for _, st := range tt.states {
				n := len(rec.events())
				p.failover(desired.Serving{}, st)
				// One state at a time: wait until it is applied.
				for deadline := time.Now().Add(5 * time.Second); !slices.Contains(rec.events()[n:], "set"); time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("state %v not applied", st)
					}
				}
			}
			// A lead or follow comes after the last set.
			for deadline := time.Now().Add(5 * time.Second); len(rec.events()) < len(strings.Fields(tt.want)) && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			cancel()
			<-done
			if got := strings.Join(rec.events(), " "); got != tt.want {
				t.Errorf("sequence %q, want %q", got, tt.want)
			}
		})
	}
}
