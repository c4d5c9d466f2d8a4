package topo

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartBackends starts a backend on every real server: HTTP on
// BackendHTTPPort, UDP on BackendUDPPort and server-first TCP on
// BackendPushPort, answering with the server's host name ("rs1") as its
// id. It returns once all of them listen.
func (tp *Topology) StartBackends(t testing.TB) {
	t.Helper()
	for _, rs := range tp.RealServers {
		rs.StartBackend(t, BackendConfig{HTTPPort: BackendHTTPPort, UDPPort: BackendUDPPort, PushPort: BackendPushPort})
	}
}

// BackendConfig says what a backend listens on; a zero port is not served.
type BackendConfig struct {
	ID       string // default: the node's host name
	HTTPPort int
	UDPPort  int
	PushPort int
	// SCTPPort answers each SCTP association with one line, as UDP does
	// each datagram (BackendSCTPPort; the sctp module must be loaded).
	SCTPPort int
}

// StartBackend starts a backend on the node and waits until it listens.
// It answers every HTTP request, UDP datagram and SCTP association with
// "id=ID client=IP:PORT" (the client address it saw); GET /healthz
// answers "ok". On the push port
// it speaks first: "id=ID client=IP:PORT seq=N", one line every PushEvery.
// It is stopped when the test ends.
func (n *Node) StartBackend(t testing.TB, cfg BackendConfig) *Process {
	t.Helper()
	if cfg.ID == "" {
		cfg.ID = n.Host
	}
	args := []string{"-id", cfg.ID}
	if cfg.HTTPPort != 0 {
		args = append(args, "-http", ":"+strconv.Itoa(cfg.HTTPPort))
	}
	if cfg.UDPPort != 0 {
		args = append(args, "-udp", ":"+strconv.Itoa(cfg.UDPPort))
	}
	if cfg.PushPort != 0 {
		args = append(args, "-push", ":"+strconv.Itoa(cfg.PushPort))
	}
	if cfg.SCTPPort != 0 {
		args = append(args, "-sctp", strconv.Itoa(cfg.SCTPPort))
	}
	return n.startSelf(t, "backend "+cfg.ID, roleBackend, args...)
}

// Proto is what a probe speaks.
type Proto string

const (
	HTTP Proto = "http"
	UDP  Proto = "udp"
	// SCTP sets up one association per request and reads the line the
	// backend writes on it.
	SCTP Proto = "sctp"
)

// Answer is the outcome of one probe request.
type Answer struct {
	Server string     // id of the backend that answered ("" on error)
	Client netip.Addr // client address the backend saw
	Err    string     // non-empty when the request failed
	// Start and End are when the request was sent and when it was
	// answered or failed: paced streams only (zero otherwise).
	Start, End time.Time
}

// Answers is the outcome of a probe run.
type Answers []Answer

// ByServer counts the answers per backend id.
func (as Answers) ByServer() map[string]int {
	m := map[string]int{}
	for _, a := range as {
		if a.Err == "" {
			m[a.Server]++
		}
	}
	return m
}

// Errors returns the failed requests' reasons.
func (as Answers) Errors() []string {
	var errs []string
	for _, a := range as {
		if a.Err != "" {
			errs = append(errs, a.Err)
		}
	}
	return errs
}

// Probe sends count requests from the node to target (a new connection or
// socket each, so each is scheduled on its own) and returns one Answer per
// request. An error means the probe itself could not run; failed requests
// are in the Answers.
func (n *Node) Probe(proto Proto, target netip.AddrPort, count int, timeout time.Duration) (Answers, error) {
	out, err := n.runSelf(roleProbe,
		"-proto", string(proto), "-target", target.String(),
		"-n", strconv.Itoa(count), "-timeout", timeout.String())
	if err != nil {
		return nil, err
	}
	return parseProbeOutput(out)
}

// parseProbeOutput reads lines "answer id=ID client=IP:PORT" and
// "error REASON", each possibly behind "timed START END " (Unix
// nanoseconds, from a paced stream).
func parseProbeOutput(out string) (Answers, error) {
	var as Answers
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		a, err := parseProbeLine(line)
		if err != nil {
			return nil, err
		}
		as = append(as, a)
	}
	return as, nil
}

func parseProbeLine(line string) (Answer, error) {
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case "error":
		return Answer{Err: rest}, nil
	case "answer":
		return parseAnswer(rest)
	case "timed":
		f := strings.SplitN(rest, " ", 3)
		if len(f) == 3 {
			start, err1 := strconv.ParseInt(f[0], 10, 64)
			end, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 == nil && err2 == nil && !strings.HasPrefix(f[2], "timed ") {
				a, err := parseProbeLine(f[2])
				a.Start, a.End = time.Unix(0, start), time.Unix(0, end)
				return a, err
			}
		}
	}
	return Answer{}, fmt.Errorf("probe printed %q", line)
}

func parseAnswer(s string) (Answer, error) {
	var a Answer
	for _, field := range strings.Fields(s) {
		k, v, _ := strings.Cut(field, "=")
		switch k {
		case "id":
			a.Server = v
		case "client":
			ap, err := netip.ParseAddrPort(v)
			if err != nil {
				return a, fmt.Errorf("answer %q: %w", s, err)
			}
			a.Client = ap.Addr()
		}
	}
	if a.Server == "" {
		return a, fmt.Errorf("answer without id: %q", s)
	}
	return a, nil
}
