package topo

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"
)

// maxStreamRequests bounds a stream: at one request per millisecond at
// best, it outlasts any test, and it still stops by itself.
const maxStreamRequests = 200000

// Stream is a client sending requests to a target one after another, each
// on a new connection (or socket), until it is stopped: the traffic a test
// keeps up while it injects a fault, to count what failed meanwhile.
type Stream struct {
	p *Process
}

// StartStream starts a stream of requests from n to target, each with the
// given timeout. It is stopped when the test ends, if Stop was not called.
func (n *Node) StartStream(t testing.TB, proto Proto, target netip.AddrPort, timeout time.Duration) *Stream {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{self, "-proto", string(proto), "-target", target.String(),
		"-n", strconv.Itoa(maxStreamRequests), "-timeout", timeout.String()}
	return &Stream{p: n.start(t, "stream to "+target.String(), []string{RoleEnv + "=" + roleProbe}, args, false)}
}

// Answers returns the answers so far.
func (s *Stream) Answers() (Answers, error) { return parseProbeOutput(s.p.Output()) }

// WaitAnswers waits until the stream has at least count answers (failed
// ones included), so that a fault lands in the middle of it.
func (s *Stream) WaitAnswers(t testing.TB, count int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		as, err := s.Answers()
		if err != nil {
			t.Fatal(err)
		}
		if len(as) >= count {
			return
		}
		if done, err := s.p.Exited(); done {
			t.Fatalf("the stream ended early: %v\n%s", err, s.p.Output())
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream has %d answers after %v, want %d", len(as), limit, count)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop ends the stream and returns all its answers; a request in flight
// when it stops is not counted.
func (s *Stream) Stop(t testing.TB) Answers {
	t.Helper()
	s.p.Stop()
	as, err := s.Answers()
	if err != nil {
		t.Fatalf("reading the stream's answers: %v", err)
	}
	return as
}

// Summary is a short account of answers: how many, how many failed, the
// first failure.
func (as Answers) Summary() string {
	errs := as.Errors()
	if len(errs) == 0 {
		return fmt.Sprintf("%d requests, none failed", len(as))
	}
	return fmt.Sprintf("%d requests, %d failed, first: %s", len(as), len(errs), errs[0])
}
