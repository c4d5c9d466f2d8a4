package healthcheck

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
)

// testRun returns the context the scheduler gives a check, due to end
// after timeout, made from parent as Run makes it.
func testRun(parent context.Context, timeout time.Duration) *checkRun {
	return &checkRun{values: context.WithoutCancel(parent), deadline: time.Now().Add(timeout)}
}

type testKey struct{}

// TestCheckRunContext: the check's context behaves as one from
// context.WithTimeout would, without a timer until something waits.
func TestCheckRunContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.WithValue(t.Context(), testKey{}, "v"))
		defer cancelParent()
		r := testRun(parent, time.Second)
		if dl, ok := r.Deadline(); !ok || dl != time.Now().Add(time.Second) {
			t.Errorf("Deadline() = %v, %v; want a second from now", dl, ok)
		}
		if v := r.Value(testKey{}); v != "v" {
			t.Errorf("Value = %v; want the parent's", v)
		}
		if err := r.Err(); err != nil {
			t.Errorf("Err() before the deadline = %v", err)
		}
		cancelParent() // Run's context ends the check through the manager, not by itself
		if err := r.Err(); err != nil {
			t.Errorf("Err() after the parent's cancel = %v; the manager cancels, not the parent", err)
		}
		time.Sleep(time.Second)
		// Nobody waited on Done: Err sees the deadline all the same.
		if err := r.Err(); err != context.DeadlineExceeded {
			t.Errorf("Err() at the deadline = %v; want DeadlineExceeded", err)
		}
		select {
		case <-r.Done():
		default:
			t.Errorf("Done() not closed after Err reported the deadline")
		}
		if err := context.Cause(r); err != context.DeadlineExceeded {
			t.Errorf("Cause = %v; want DeadlineExceeded", err)
		}
		r.cancel(context.Canceled)
		if err := r.Err(); err != context.DeadlineExceeded {
			t.Errorf("Err() after a later cancel = %v; the first end stays", err)
		}
	})
}

func TestCheckRunDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := testRun(t.Context(), time.Second)
		start := time.Now()
		<-r.Done()
		if d := time.Since(start); d != time.Second {
			t.Errorf("Done closed after %v; want 1s", d)
		}
		if err := r.Err(); err != context.DeadlineExceeded {
			t.Errorf("Err() = %v", err)
		}

		r = testRun(t.Context(), time.Second)
		done := r.Done()
		time.AfterFunc(100*time.Millisecond, func() { r.cancel(context.Canceled) })
		<-done
		if d := time.Since(start); d != time.Second+100*time.Millisecond {
			t.Errorf("Done closed after %v; want at the cancel", d-time.Second)
		}
		if err := r.Err(); err != context.Canceled {
			t.Errorf("Err() = %v; want Canceled", err)
		}
		synctest.Wait()
		if r.timer.Stop() {
			t.Errorf("the deadline's timer still runs after the cancel")
		}
	})
}

// TestCheckRunAfterFunc: context.AfterFunc and contexts made from the
// check's run when it ends, by deadline or cancel, and not once stopped.
func TestCheckRunAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := testRun(t.Context(), time.Second)
		var ran, stoppedRan atomic.Int32
		context.AfterFunc(r, func() { ran.Add(1) })
		stop := context.AfterFunc(r, func() { stoppedRan.Add(1) })
		if !stop() {
			t.Errorf("stop() before the end = false")
		}
		child, cancelChild := context.WithTimeout(r, time.Hour)
		defer cancelChild()
		if dl, _ := child.Deadline(); dl != time.Now().Add(time.Second) {
			t.Errorf("child deadline %v; want the check's", dl)
		}
		start := time.Now()
		<-child.Done()
		if d := time.Since(start); d != time.Second {
			t.Errorf("child done after %v; want 1s", d)
		}
		if err := child.Err(); err != context.DeadlineExceeded {
			t.Errorf("child Err() = %v", err)
		}
		synctest.Wait()
		if ran.Load() != 1 || stoppedRan.Load() != 0 {
			t.Errorf("AfterFunc ran %d times, the stopped one %d; want 1 and 0", ran.Load(), stoppedRan.Load())
		}
		if stop() {
			t.Errorf("stop() after the end = true")
		}

		// On a context that has ended, f runs at once.
		context.AfterFunc(r, func() { ran.Add(1) })
		synctest.Wait()
		if ran.Load() != 2 {
			t.Errorf("AfterFunc on an ended context did not run")
		}

		// Canceled: with Canceled.
		r = testRun(t.Context(), time.Second)
		child, cancelChild2 := context.WithCancel(r)
		defer cancelChild2()
		r.cancel(context.Canceled)
		<-child.Done()
		if err := child.Err(); err != context.Canceled {
			t.Errorf("child Err() after cancel = %v", err)
		}
	})
}

// TestCheckRunWithCheckers: every checker gives the same result with the
// scheduler's context as with context.WithTimeout: a timeout with its
// message, or context.Canceled when canceled before the deadline. Not in
// parallel with other tests: its listeners must not take a port that
// another test expects to be closed.
func TestCheckRunWithCheckers(t *testing.T) {
	full := tcpTestFullListener(t)
	silent := httpTestSilent(t)
	dir, _ := execTestDirs(t)
	sleep := execTestScript(t, dir, "sleep.sh", "exec sleep 10")
	tcp := checkerTestHC(config.CheckTCP)
	http := checkerTestHC(config.CheckHTTP)
	exec := checkerTestHC(config.CheckExec)
	exec.Command = []string{sleep}
	poller := newTCPChecker(tcp)
	poller.wait = true
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name   string
		c      Checker
		target netip.AddrPort
	}{
		{"tcp", newTCPChecker(tcp), full},
		{"tcp poller", poller, full},
		{"http", checkerTestNew(t, http), silent},
		{"exec", checkerTestNew(t, exec), full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			target := Target{Addr: tc.target, Service: "web"}
			std, stdCancel := context.WithTimeout(context.Background(), timeout)
			defer stdCancel()
			want := tc.c.Check(std, target)

			r := testRun(context.Background(), timeout)
			start := time.Now()
			err := tc.c.Check(r, target)
			if d := time.Since(start); d < timeout || d > timeout+checkerTestSlack {
				t.Errorf("check took %v with a timeout of %v", d, timeout)
			}
			if err == nil || want == nil || err.Error() != want.Error() {
				t.Errorf("check: %v; with context.WithTimeout: %v", err, want)
			}
			if !strings.Contains(err.Error(), "timeout after 300ms") {
				t.Errorf("check: %v; want a timeout after 300ms", err)
			}

			r = testRun(context.Background(), 10*time.Second)
			time.AfterFunc(100*time.Millisecond, func() { r.cancel(context.Canceled) })
			start = time.Now()
			err = tc.c.Check(r, target)
			if d := time.Since(start); d > checkerTestSlack {
				t.Errorf("canceled check took %v", d)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("canceled check: %v; want an error wrapping context.Canceled", err)
			}
		})
	}
}
