// Package poll waits for a condition in e2e tests: the kernel, the network
// and the programs under test settle in their own time (slowly, under an
// emulator), so tests wait for states with generous limits instead of
// asserting on timings.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until checks its condition.
const Interval = 250 * time.Millisecond

// Until calls cond until it returns nil, and ends the test with cond's last
// error if that does not happen within limit. what says what is awaited,
// for the failure message.
func Until(t testing.TB, what string, limit time.Duration, cond func() error) {
	t.Helper()
	if err := Wait(limit, cond); err != nil {
		t.Fatalf("waited %v for %s; last error: %v", limit, what, err)
	}
}

// Wait calls cond until it returns nil or limit has passed, and returns its
// last error (nil on success).
func Wait(limit time.Duration, cond func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(Interval)
	}
}
