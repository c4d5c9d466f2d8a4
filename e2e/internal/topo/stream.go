package topo

import (
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	return n.startStream(t, proto, target, timeout, 0)
}

// StartPacedStream is StartStream where a request starts every so often
// whether or not the ones before it were answered, and each answer carries
// its Start and End: while the target is unreachable requests pile up
// rather than one waiting alone, so the first success after an outage
// comes when the target is back, to within every. timeout must be under
// the 10 s Stop waits for the requests in flight.
func (n *Node) StartPacedStream(t testing.TB, proto Proto, target netip.AddrPort, timeout, every time.Duration) *Stream {
	t.Helper()
	if every <= 0 {
		t.Fatalf("a paced stream needs a positive interval, not %v", every)
	}
	return n.startStream(t, proto, target, timeout, every)
}

func (n *Node) startStream(t testing.TB, proto Proto, target netip.AddrPort, timeout, every time.Duration) *Stream {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{self, "-proto", string(proto), "-target", target.String(),
		"-n", strconv.Itoa(maxStreamRequests), "-timeout", timeout.String(), "-every", every.String()}
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
// when it stops is not counted, except in a paced stream, which waits for
// them.
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

// maxInFlight bounds a paced stream's requests in flight: far above what
// a test's outage piles up (a request every 20 ms for a 5 s timeout is
// 250).
const maxInFlight = 1024

// runPaced is the paced probe: a request every every, n in all, each in
// its own goroutine, printed as "timed START END answer BODY" or "timed
// START END error REASON" when it ends. SIGTERM stops new requests; those
// in flight are still waited for and printed.
func runPaced(n int, every time.Duration, once func() (string, error)) error {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	tick := time.NewTicker(every)
	defer tick.Stop()
	slots := make(chan struct{}, maxInFlight)
	var mu sync.Mutex // one line at a time
	var wg sync.WaitGroup
	defer wg.Wait()
	for range n {
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			start := time.Now()
			body, err := once()
			end := time.Now()
			line := "answer " + strings.TrimSpace(body)
			if err != nil {
				line = "error " + strings.ReplaceAll(err.Error(), "\n", " ")
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Printf("timed %d %d %s\n", start.UnixNano(), end.UnixNano(), line)
		})
	}
	return nil
}
