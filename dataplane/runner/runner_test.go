package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a SyncFunc that notes when and why it ran, failing the runs
// listed in fail (by 0-based index).
type recorder struct {
	start time.Time
	runs  []string
	fail  []int
}

func (r *recorder) sync(_ context.Context, why Reason) error {
	n := len(r.runs)
	r.runs = append(r.runs, fmt.Sprintf("%s@%s", why, time.Since(r.start)))
	if slices.Contains(r.fail, n) {
		return errors.New("kernel said no")
	}
	return nil
}

// step is one action of a scenario: Run() calls, then Repair() calls,
// then time passing.
type step struct {
	runs    int
	advance time.Duration
	repairs int
	nows    int // Now() calls, after the repairs
}

func TestRunner(t *testing.T) {
	opts := Options{MinInterval: time.Second, MaxInterval: 10 * time.Second, Burst: 2, RetryMin: time.Second, RetryMax: 4 * time.Second}
	tests := []struct {
		name  string
		fail  []int
		steps []step
		want  []string
	}{
		{"nothing before the first request or period",
			nil, []step{{advance: 9 * time.Second}}, nil},
		{"requests coalesce into one sync",
			nil, []step{{runs: 10, advance: 500 * time.Millisecond}}, []string{"initial@0s"}},
		{"burst, then at most one per MinInterval",
			nil, []step{{runs: 1}, {runs: 1}, {runs: 1}, {advance: 1500 * time.Millisecond}, {runs: 1}, {advance: 2 * time.Second}},
			[]string{"initial@0s", "requested@0s", "requested@1s", "requested@2s"}},
		{"requests during the rate-limit wait are covered by the sync that follows it",
			nil, []step{{runs: 1}, {runs: 1}, {runs: 1, advance: 100 * time.Millisecond}, {runs: 5, advance: 3 * time.Second}},
			[]string{"initial@0s", "requested@0s", "requested@1s"}},
		{"periodic full syncs when nothing is requested (the first is the initial one)",
			nil, []step{{advance: 25 * time.Second}}, []string{"initial@10s", "periodic@20s"}},
		{"a request does not postpone the periodic full sync",
			nil, []step{{runs: 1}, {advance: 5 * time.Second}, {runs: 1, advance: 12 * time.Second}}, []string{"initial@0s", "requested@5s", "periodic@10s"}},
		{"a steady stream of requests still gets a full sync every MaxInterval",
			nil, slices.Repeat([]step{{runs: 1, advance: 3 * time.Second}}, 8),
			[]string{"initial@0s", "requested@3s", "requested@6s", "requested@9s", "periodic@10s",
				"requested@12s", "requested@15s", "requested@18s", "periodic@20s", "requested@21s"}},
		{"a full sync restarts the period",
			[]int{0}, []step{{runs: 1, advance: 15 * time.Second}}, []string{"initial@0s", "retry@1s", "periodic@11s"}},
		{"failures retry with doubling backoff up to RetryMax, then reset",
			[]int{0, 1, 2, 3}, []step{{runs: 1, advance: 20 * time.Second}, {runs: 1}},
			[]string{"initial@0s", "retry@1s", "retry@3s", "retry@7s", "retry@11s", "requested@20s"}},
		{"a request after a failure stays requested; a success cancels the retry",
			[]int{0}, []step{{runs: 1, advance: 500 * time.Millisecond}, {runs: 1, advance: 5 * time.Second}},
			[]string{"initial@0s", "requested@500ms"}},
		{"failing requests do not stop the retries",
			[]int{0, 1, 2}, []step{{runs: 1, advance: 500 * time.Millisecond}, {runs: 1, advance: 5 * time.Second}},
			[]string{"initial@0s", "requested@500ms", "retry@2.5s"}},
		{"a repair before anything else is the initial sync",
			nil, []step{{repairs: 1}}, []string{"initial@0s"}},
		{"a repair is a full sync at once when the rate allows",
			nil, []step{{runs: 1}, {repairs: 1}}, []string{"initial@0s", "drift@0s"}},
		{"repairs coalesce and wait for MinInterval like requests",
			nil, []step{{runs: 1}, {runs: 1}, {repairs: 3, advance: 3 * time.Second}},
			[]string{"initial@0s", "requested@0s", "drift@1s"}},
		{"a repair made while a request waits makes that sync full",
			nil, []step{{runs: 1}, {runs: 1}, {runs: 1}, {repairs: 1, advance: 3 * time.Second}},
			[]string{"initial@0s", "requested@0s", "drift@1s"}},
		{"a request made while a repair waits is covered by it",
			nil, []step{{runs: 1}, {runs: 1}, {repairs: 1}, {runs: 1, advance: 3 * time.Second}},
			[]string{"initial@0s", "requested@0s", "drift@1s"}},
		{"a repair restarts the period",
			nil, []step{{runs: 1, advance: 5 * time.Second}, {repairs: 1, advance: 12 * time.Second}},
			[]string{"initial@0s", "drift@5s", "periodic@15s"}},
		{"Now runs at once, past the rate limit",
			nil, []step{{runs: 1}, {runs: 1}, {nows: 1}, {nows: 1}}, []string{"initial@0s", "requested@0s", "requested@0s", "requested@0s"}},
		{"Now cuts a request's rate-limit wait short",
			nil, []step{{runs: 1}, {runs: 1}, {runs: 1, advance: 100 * time.Millisecond}, {nows: 1, advance: 3 * time.Second}},
			[]string{"initial@0s", "requested@0s", "requested@100ms"}},
		{"a failed repair is retried",
			[]int{1}, []step{{runs: 1}, {repairs: 1, advance: 5 * time.Second}},
			[]string{"initial@0s", "drift@0s", "retry@1s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := &recorder{start: time.Now(), fail: tt.fail}
				r := New(rec.sync, opts)
				ctx, cancel := context.WithCancel(t.Context())
				done := make(chan struct{})
				go func() { r.Loop(ctx); close(done) }()
				for _, s := range tt.steps {
					for range s.runs {
						r.Run() // back to back: these coalesce
					}
					for range s.repairs {
						r.Repair()
					}
					for range s.nows {
						r.Now()
					}
					synctest.Wait()
					time.Sleep(s.advance)
					synctest.Wait()
				}
				cancel()
				<-done
				if !slices.Equal(rec.runs, tt.want) {
					t.Errorf("syncs %v\nwant  %v", rec.runs, tt.want)
				}
			})
		})
	}
}

func TestReasonFull(t *testing.T) {
	for _, tt := range []struct {
		r    Reason
		full bool
	}{{Requested, false}, {Periodic, true}, {Retry, true}, {Initial, true}, {Drift, true}} {
		if tt.r.Full() != tt.full {
			t.Errorf("%s.Full() = %v", tt.r, !tt.full)
		}
	}
}
