package topo

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const roleHold = "hold"

// exchangeTimeout bounds one exchange on a held connection: a request and
// its answer, or the next pushed line.
const exchangeTimeout = 10 * time.Second

// HoldOptions says how the connections of HoldMany talk.
type HoldOptions struct {
	// Count is how many connections to hold (default 1).
	Count int
	// Every makes client-first connections send a request every Every on
	// their own, besides those Ask sends; zero sends only those.
	Every time.Duration
	// Push makes the connections server-first: target is a push port
	// (BackendPushPort), whose real server writes a line every PushEvery
	// from the accept on; the client only reads.
	Push bool
}

// Holds is a set of TCP connections through a virtual server, held open
// by one helper process on a node, for tests of what happens to
// established connections (draining, restarts, failover). A connection
// whose exchange failed once stays failed: its later exchanges report
// that first error.
type Holds struct {
	p     *Process
	Conns []HeldConn
	asks  int
}

// HeldConn is one connection of a Holds.
type HeldConn struct {
	Local  netip.AddrPort // the client's end, as ipvsadm -Lnc lists it
	Server string         // the real server of its first exchange
}

// Exchange is what one held connection said when asked.
type Exchange struct {
	Answer
	// Longest is the longest the connection went between two successful
	// exchanges, from its first to this one; FailedAt is when its first
	// failure happened. Both only with Every or Push.
	Longest  time.Duration
	FailedAt time.Time
}

// Lost reports whether the exchange failed, or another real server than
// the connection's first answered it.
func (x Exchange) Lost(c HeldConn) bool { return x.Err != "" || x.Server != c.Server }

// HoldMany opens opts.Count connections to target from n, each with one
// first exchange, and keeps them open until Reset (or the test's end).
func (n *Node) HoldMany(t testing.TB, target netip.AddrPort, opts HoldOptions) *Holds {
	t.Helper()
	if opts.Count < 1 {
		opts.Count = 1
	}
	args := []string{"-target", target.String(), "-n", fmt.Sprint(opts.Count), "-every", opts.Every.String()}
	if opts.Push {
		args = append(args, "-push")
	}
	p := n.startSelf(t, fmt.Sprintf("hold %d to %s", opts.Count, target), roleHold, args...)
	rep, err := parseHoldOutput(p.Output())
	if err != nil || len(rep.conns) != opts.Count {
		t.Fatalf("holding %d connections to %s: %v\n%s", opts.Count, target, err, p.Output())
	}
	h := &Holds{p: p}
	for i, c := range rep.conns {
		if first := rep.first[i]; first.Err != "" {
			t.Fatalf("holding a connection to %s: %s\n%s", target, first.Err, p.Output())
		}
		h.Conns = append(h.Conns, HeldConn{Local: c, Server: rep.first[i].Server})
	}
	return h
}

// Ask makes every connection exchange once more (a request, or the next
// pushed line) and returns what each said, in the order of Conns.
func (h *Holds) Ask(t testing.TB) []Exchange {
	t.Helper()
	h.asks++
	if err := h.p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * exchangeTimeout)
	for time.Now().Before(deadline) {
		rep, err := parseHoldOutput(h.p.Output())
		if err != nil {
			t.Fatalf("held connections: %v\n%s", err, h.p.Output())
		}
		if len(rep.asks) >= h.asks {
			return rep.asks[h.asks-1]
		}
		if done, err := h.p.Exited(); done {
			t.Fatalf("the holding process ended: %v\n%s", err, h.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no answer on the held connections within %v:\n%s", 3*exchangeTimeout, h.p.Output())
	return nil
}

// Reset closes the connections with TCP resets, so that IPVS forgets them
// within its CLOSE timeout (10 s) rather than TIME_WAIT's two minutes.
func (h *Holds) Reset() { h.p.Stop() }

// Held is one client-first connection held open (HoldMany of one).
type Held struct {
	hs *Holds
	// Server is the real server that answered the first request.
	Server string
}

// Hold opens an HTTP keep-alive connection to target from n, sends one
// request on it and keeps the connection open until Reset.
func (n *Node) Hold(t testing.TB, target netip.AddrPort) *Held {
	t.Helper()
	hs := n.HoldMany(t, target, HoldOptions{})
	return &Held{hs: hs, Server: hs.Conns[0].Server}
}

// Ask sends one more request on the held connection and returns who
// answered it.
func (h *Held) Ask(t testing.TB) Answer {
	t.Helper()
	return h.hs.Ask(t)[0].Answer
}

// Local is the client's end of the connection.
func (h *Held) Local() netip.AddrPort { return h.hs.Conns[0].Local }

// Reset closes the connection with a TCP reset (see Holds.Reset).
func (h *Held) Reset() { h.hs.Reset() }

// holdReport is what a hold role printed: its connections' local
// addresses and first exchanges, then one block per ask.
type holdReport struct {
	conns []netip.AddrPort
	first []Answer
	asks  [][]Exchange
}

// parseHoldOutput reads the hold role's lines: "conn I LOCAL", then
// "answer I BODY" or "error I REASON" for each exchange, "gap I MS
// FAILED" after an asked one (with Every or Push; FAILED in Unix
// nanoseconds, 0 when it has not failed), and "asked K" closing the K-th
// ask.
func parseHoldOutput(out string) (holdReport, error) {
	var rep holdReport
	var block []Exchange
	for _, line := range strings.Split(out, "\n") {
		kind, rest, _ := strings.Cut(line, " ")
		idx, rest, _ := strings.Cut(rest, " ")
		var i int
		if _, err := fmt.Sscan(idx, &i); err != nil || i < 0 {
			continue // not the role's (a Go runtime message, say)
		}
		switch kind {
		case "conn":
			ap, err := netip.ParseAddrPort(rest)
			if err != nil {
				return rep, fmt.Errorf("%q: %w", line, err)
			}
			rep.conns = append(rep.conns, ap)
		case "answer", "error":
			a := Answer{Err: rest}
			if kind == "answer" {
				var err error
				if a, err = parseAnswer(rest); err != nil {
					a.Err = err.Error()
				}
			}
			if i < len(rep.conns) && len(rep.first) == i {
				rep.first = append(rep.first, a)
				continue
			}
			for len(block) <= i {
				block = append(block, Exchange{})
			}
			block[i].Answer = a
		case "gap":
			var ms, failed int64
			if _, err := fmt.Sscan(rest, &ms, &failed); err != nil || i >= len(block) {
				return rep, fmt.Errorf("%q: not a gap of an asked connection", line)
			}
			block[i].Longest = time.Duration(ms) * time.Millisecond
			if failed != 0 {
				block[i].FailedAt = time.Unix(0, failed)
			}
		case "asked":
			if len(block) != len(rep.conns) {
				return rep, fmt.Errorf("ask %d answered %d of %d connections", i, len(block), len(rep.conns))
			}
			rep.asks = append(rep.asks, block)
			block = nil
		}
	}
	return rep, nil
}

// runHold is the helper behind HoldMany: -n connections to -target, each
// with a first exchange; with -every a request on each every so long,
// with -push a reader of each; on every SIGUSR1 one more exchange on each,
// reported with its longest gap; SIGTERM resets the connections and ends.
func runHold(args []string) error {
	fs := flag.NewFlagSet(roleHold, flag.ContinueOnError)
	target := fs.String("target", "", "IP:PORT to connect to")
	n := fs.Int("n", 1, "connections")
	every := fs.Duration("every", 0, "client-first: a request on each connection this often (0: only when asked)")
	push := fs.Bool("push", false, "server-first: read what the server sends")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, os.Interrupt)
	conns := make([]*heldConn, 0, *n)
	defer func() {
		for _, c := range conns {
			c.reset()
		}
	}()
	for i := range *n {
		c, err := dialHeld(*target, *push)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		fmt.Printf("conn %d %s\n", i, c.local)
		printExchange(i, c.first(), false)
	}
	fmt.Println(readyLine)
	for _, c := range conns {
		switch {
		case c.push:
			go c.read()
		case *every > 0:
			go c.tick(*every)
		}
	}
	timed := *push || *every > 0
	asks := 0
	for sig := range sigs {
		if sig != syscall.SIGUSR1 {
			return nil
		}
		asks++
		xs := make([]exchange, len(conns))
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Go(func() { xs[i] = c.ask() })
		}
		wg.Wait()
		for i, x := range xs {
			printExchange(i, x, timed)
		}
		fmt.Printf("asked %d\n", asks)
	}
	return nil
}

// exchange is one outcome on a held connection, as the role prints it.
type exchange struct {
	body     string
	err      error
	longest  time.Duration
	failedAt time.Time
}

func printExchange(i int, x exchange, gap bool) {
	if x.err != nil {
		fmt.Printf("error %d %s\n", i, strings.ReplaceAll(x.err.Error(), "\n", " "))
	} else {
		fmt.Printf("answer %d %s\n", i, x.body)
	}
	if gap {
		var failed int64
		if !x.failedAt.IsZero() {
			failed = x.failedAt.UnixNano()
		}
		fmt.Printf("gap %d %d %d\n", i, x.longest.Milliseconds(), failed)
	}
}

// heldConn is one connection of the hold role.
type heldConn struct {
	conn  *net.TCPConn
	r     *bufio.Reader
	host  string
	push  bool
	local netip.AddrPort

	// mu makes client-first exchanges one at a time, and guards the rest.
	mu       sync.Mutex
	last     time.Time     // the last successful exchange
	longest  time.Duration // between two successful exchanges
	body     string        // the last answer or pushed line
	lines    int           // pushed lines read
	failed   error         // the first failure; the connection is lost
	failedAt time.Time
}

func dialHeld(target string, push bool) (*heldConn, error) {
	c, err := net.DialTimeout("tcp", target, exchangeTimeout)
	if err != nil {
		return nil, err
	}
	conn := c.(*net.TCPConn)
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &heldConn{conn: conn, r: bufio.NewReader(conn), host: target, push: push, local: local}, nil
}

// first is the connection's first exchange: a request, or the first
// pushed line.
func (c *heldConn) first() exchange {
	if !c.push {
		return c.request()
	}
	line, err := c.readLine()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record(line, err)
	return c.outcome()
}

// request sends a request now and waits for its answer.
func (c *heldConn) request() exchange {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failed == nil {
		c.record(holdRequest(c.conn, c.r, c.host))
	}
	return c.outcome()
}

// tick sends a request every so often until one fails.
func (c *heldConn) tick(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for range t.C {
		if c.request().err != nil {
			return
		}
	}
}

// read takes the server's lines as they come until the connection fails
// or stalls.
func (c *heldConn) read() {
	for {
		line, err := c.readLine()
		c.mu.Lock()
		c.record(line, err)
		c.mu.Unlock()
		if err != nil {
			return
		}
	}
}

func (c *heldConn) readLine() (string, error) {
	if err := c.conn.SetReadDeadline(time.Now().Add(exchangeTimeout)); err != nil {
		return "", err
	}
	line, err := c.r.ReadString('\n')
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("no line pushed for %v: %w", exchangeTimeout, err)
	}
	return strings.TrimSpace(line), err
}

// ask is one more exchange: a request now, or the next line pushed after
// now.
func (c *heldConn) ask() exchange {
	if !c.push {
		return c.request()
	}
	c.mu.Lock()
	seen := c.lines
	c.mu.Unlock()
	deadline := time.Now().Add(exchangeTimeout)
	for {
		c.mu.Lock()
		if c.failed != nil || c.lines > seen {
			defer c.mu.Unlock()
			return c.outcome()
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			return exchange{err: fmt.Errorf("no line pushed within %v of the ask", exchangeTimeout)}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record notes an exchange's outcome; c.mu is held.
func (c *heldConn) record(body string, err error) {
	if c.failed != nil {
		return
	}
	now := time.Now()
	if err != nil {
		c.failed, c.failedAt = err, now
		return
	}
	if !c.last.IsZero() {
		c.longest = max(c.longest, now.Sub(c.last))
	}
	c.last, c.body = now, body
	c.lines++
}

// outcome is the connection's state as an exchange; c.mu is held.
func (c *heldConn) outcome() exchange {
	return exchange{body: c.body, err: c.failed, longest: c.longest, failedAt: c.failedAt}
}

// reset closes the connection with a reset (linger 0) instead of a FIN.
func (c *heldConn) reset() {
	_ = c.conn.SetLinger(0)
	_ = c.conn.Close()
}

func holdRequest(conn net.Conn, r *bufio.Reader, host string) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(exchangeTimeout)); err != nil {
		return "", err
	}
	if _, err := fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return strings.TrimSpace(string(b)), nil
}
