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
	"syscall"
	"testing"
	"time"
)

const roleHold = "hold"

// Held is one TCP connection through a virtual server, held open by a
// helper process on a node, for tests of what happens to established
// connections (draining, restarts).
type Held struct {
	p *Process
	// Server is the real server that answered the first request.
	Server string
}

// Hold opens an HTTP keep-alive connection to target from n, sends one
// request on it and keeps the connection open until Reset.
func (n *Node) Hold(t testing.TB, target netip.AddrPort) *Held {
	t.Helper()
	p := n.startSelf(t, "hold "+target.String(), roleHold, "-target", target.String())
	answers := holdAnswers(p.Output())
	if len(answers) != 1 || answers[0].Err != "" {
		t.Fatalf("holding a connection to %s: %+v\n%s", target, answers, p.Output())
	}
	return &Held{p: p, Server: answers[0].Server}
}

// Ask sends one more request on the held connection and returns who
// answered it.
func (h *Held) Ask(t testing.TB) Answer {
	t.Helper()
	before := len(holdAnswers(h.p.Output()))
	if err := h.p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if as := holdAnswers(h.p.Output()); len(as) > before {
			return as[before]
		}
		if done, err := h.p.Exited(); done {
			t.Fatalf("the holding process ended: %v\n%s", err, h.p.Output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no answer on the held connection within 30s:\n%s", h.p.Output())
	return Answer{}
}

// Reset closes the connection with a TCP reset, so that IPVS forgets it
// within its CLOSE timeout (10 s) rather than TIME_WAIT's two minutes.
func (h *Held) Reset() { h.p.Stop() }

// holdAnswers parses the "answer ..."/"error ..." lines a hold role printed.
func holdAnswers(out string) Answers {
	var as Answers
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "answer "); ok {
			a, err := parseAnswer(rest)
			if err != nil {
				a.Err = err.Error()
			}
			as = append(as, a)
		} else if rest, ok := strings.CutPrefix(line, "error "); ok {
			as = append(as, Answer{Err: rest})
		}
	}
	return as
}

// runHold is the helper behind Node.Hold: one HTTP/1.1 connection to
// -target; a request at start and on every SIGUSR1, each printed as
// "answer BODY" or "error REASON"; SIGTERM resets the connection and ends.
func runHold(args []string) error {
	fs := flag.NewFlagSet(roleHold, flag.ContinueOnError)
	target := fs.String("target", "", "IP:PORT to connect to")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGTERM, os.Interrupt)
	c, err := net.DialTimeout("tcp", *target, 10*time.Second)
	if err != nil {
		return err
	}
	conn := c.(*net.TCPConn)
	r := bufio.NewReader(conn)
	ask := func() {
		body, err := holdRequest(conn, r, *target)
		if err != nil {
			fmt.Printf("error %v\n", err)
			return
		}
		fmt.Printf("answer %s\n", body)
	}
	ask()
	fmt.Println(readyLine)
	for sig := range sigs {
		if sig == syscall.SIGUSR1 {
			ask()
			continue
		}
		// Linger 0: close sends a reset instead of a FIN.
		if err := conn.SetLinger(0); err != nil {
			return err
		}
		return conn.Close()
	}
	return nil
}

func holdRequest(conn net.Conn, r *bufio.Reader, host string) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
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
