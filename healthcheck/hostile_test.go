package healthcheck

// Real servers that attack the checker: endless or malformed answers must
// fail the check with a bounded read, in bounded memory, by its deadline.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/lbdproject/lbd/config"
)

// hostileMaxAlloc bounds what one check against a hostile server may
// allocate: a few times its caps, with room for the race detector. Without
// caps, an endless header allocated 3 GiB in a 2 s check.
const hostileMaxAlloc = 16 << 20

// hostileAlloc runs f and returns how many bytes were allocated meanwhile.
// The tests that use it are not parallel, so that little else allocates.
func hostileAlloc(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hostileRun runs one check of c against target with timeout and asserts
// that it fails with want and allocates less than hostileMaxAlloc.
func hostileRun(t *testing.T, c Checker, target netip.AddrPort, timeout time.Duration, want string) {
	t.Helper()
	var err error
	var elapsed time.Duration
	alloc := hostileAlloc(func() { err, elapsed = checkerTestRun(t, c, Target{Addr: target}, timeout) })
	checkerTestWant(t, err, want)
	if err != nil {
		if msg := err.Error(); len(msg) > resultMax || strings.ContainsFunc(msg, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			t.Errorf("error of %d bytes, or with control characters: %q", len(msg), msg)
		}
	}
	if alloc > hostileMaxAlloc {
		t.Errorf("one check allocated %d MiB; want less than %d MiB", alloc>>20, hostileMaxAlloc>>20)
	}
	t.Logf("%v after %s, %d KiB allocated", err, elapsed, alloc>>10)
}

// hostileHTTPServer serves HTTP on loopback: it reads a request's head and
// has answer write the response. A response that ends (answer returns
// nil) is followed by reading until the checker closes, so that closing
// first does not reset the connection under the response.
func hostileHTTPServer(t *testing.T, answer func(io.Writer) error) netip.AddrPort {
	t.Helper()
	l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) {
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(c)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "\r\n" {
				break
			}
		}
		if answer(c) == nil {
			io.Copy(io.Discard, br)
		}
	})
	return checkerTestAddr(l.Addr())
}

// hostileHTTPSServer is hostileHTTPServer over TLS, with httptest's
// certificate.
func hostileHTTPSServer(t *testing.T, answer func(io.Writer) error) netip.AddrPort {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if answer(c) == nil {
			io.Copy(io.Discard, c)
		}
	}))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return checkerTestAddr(srv.Listener.Addr())
}

// hostileEndless writes head, then repeat until the checker goes away.
func hostileEndless(head, repeat string) func(io.Writer) error {
	chunk := []byte(strings.Repeat(repeat, max(1, 8192/len(repeat))))
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		for {
			if _, err := w.Write(chunk); err != nil {
				return err
			}
		}
	}
}

// hostileOnce writes response and ends.
func hostileOnce(response string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, response)
		return err
	}
}

// hostileTrickle writes head, then one byte every 20 ms: a slowloris
// server, which only the deadline stops.
func hostileTrickle(head string) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, head); err != nil {
			return err
		}
		for {
			b := byte('a')
			if _, err := w.Write([]byte{b}); err != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func TestHTTPCheckHostileServer(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\n"
	tests := []struct {
		name    string
		answer  func(io.Writer) error
		body    string // expect_body
		timeout time.Duration
		https   bool
		want    string
	}{
		{name: "endless status line", answer: hostileEndless("HTTP/1.1 200 OK", "a"),
			want: "read response: status line exceeds 16 KiB"},
		{name: "endless header", answer: hostileEndless(ok+"X-Endless: ", "a"),
			want: "read response: response headers exceed 16 KiB"},
		{name: "endless header over TLS", answer: hostileEndless(ok+"X-Endless: ", "a"), https: true,
			want: "read response: response headers exceed 16 KiB"},
		{name: "endless headers", answer: hostileEndless(ok, "X-Many: a\r\n"),
			want: "read response: response headers exceed 16 KiB"},
		{name: "endless informational responses", answer: hostileEndless("", "HTTP/1.1 100 Continue\r\n\r\n"),
			want: "read response: response headers exceed 16 KiB"},
		{name: "endless body", answer: hostileEndless(ok+"Connection: close\r\n\r\n", "hay "), body: "needle",
			want: `first 64 KiB of body do not contain "needle"`},
		// net/http bounds chunk extensions to 16 bytes a chunk on average:
		// 1.2 MiB for 64 KiB of data, without the cap.
		{name: "endless chunks with extensions", answer: hostileEndless(ok+"Transfer-Encoding: chunked\r\n\r\n", "1;abcdefghijklm\r\nx\r\n"),
			body: "needle", want: "read body: response body with its framing exceeds 80 KiB"},
		{name: "endless chunk extension", answer: hostileEndless(ok+"Transfer-Encoding: chunked\r\n\r\n1;", "a"),
			body: "needle", want: "read body: "},
		{name: "endless trailer", answer: hostileEndless(ok+"Transfer-Encoding: chunked\r\n\r\n3\r\nhay\r\n0\r\nX-Trailer: ", "a"),
			body: "needle", want: "read body: http: suspiciously long trailer after chunked body"},
		{name: "long malformed status line", answer: hostileOnce("HTTP/1.1 2000 " + strings.Repeat("\x1b[31m", 2000) + "\r\n\r\n"),
			want: `read response: malformed HTTP status code "2000"`},
		{name: "long malformed response", answer: hostileOnce(strings.Repeat("\x1b[31m", 2000) + "\r\n\r\n"),
			want: "read response: malformed HTTP response"},
		{name: "long malformed header", answer: hostileOnce(ok + "\x1b]0;pwned\x07" + strings.Repeat("x", 9000) + "\r\n\r\n"),
			want: `read response: malformed MIME header`},
		{name: "slowloris head", answer: hostileTrickle(ok + "X-Slow: "), timeout: 500 * time.Millisecond,
			want: "read response: timeout after 500ms"},
		{name: "slowloris body", answer: hostileTrickle(ok + "Connection: close\r\n\r\n"), body: "needle", timeout: 500 * time.Millisecond,
			want: "read body: timeout after 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := checkerTestHC(config.CheckHTTP)
			srv := hostileHTTPServer
			if tt.https {
				hc.Type, hc.TLSVerify, srv = config.CheckHTTPS, false, hostileHTTPSServer
			}
			hc.ExpectBody = tt.body
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			hostileRun(t, checkerTestNew(t, hc), srv(t, tt.answer), timeout, tt.want)
		})
	}
}

// TestHTTPCheckHeadCapFits: a response whose head is just within the cap
// passes, with or without a body to search.
func TestHTTPCheckHeadCapFits(t *testing.T) {
	head := "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n"
	filler := "X-Filler: " + strings.Repeat("a", httpMaxHead-len(head)-len("X-Filler: \r\n\r\n")) + "\r\n\r\n"
	for _, body := range []string{"", "needle"} {
		hc := checkerTestHC(config.CheckHTTP)
		hc.ExpectBody = body
		srv := hostileHTTPServer(t, hostileOnce(head+filler+"needle"))
		err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: srv}, 2*time.Second)
		checkerTestWant(t, err, "")
	}
}

// hostileDNSReply answers a query with answers for its question.
func hostileDNSReply(t *testing.T, q []byte, answers func(b *dnsmessage.Builder, name dnsmessage.Name) error) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	question, err := p.Question()
	if err != nil {
		return nil
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired})
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		t.Error(err)
	}
	if err := b.Question(question); err != nil {
		t.Error(err)
	}
	if err := b.StartAnswers(); err != nil {
		t.Error(err)
	}
	if err := answers(&b, question.Name); err != nil {
		t.Error(err)
	}
	out, err := b.Finish()
	if err != nil {
		t.Error(err)
	}
	return out
}

func TestDNSCheckHostileServer(t *testing.T) {
	rh := func(name dnsmessage.Name) dnsmessage.ResourceHeader {
		return dnsmessage.ResourceHeader{Name: name, Class: dnsmessage.ClassINET, TTL: 60}
	}
	// One TXT record of 60000 bytes, split into strings of 250.
	longTXT := func(b *dnsmessage.Builder, name dnsmessage.Name) error {
		var txt []string
		for range 240 {
			txt = append(txt, strings.Repeat("\x1b", 250))
		}
		return b.TXTResource(rh(name), dnsmessage.TXTResource{TXT: txt})
	}
	// As many CNAMEs as fit: compressed, each answer takes 14 bytes of
	// the reply and reads as a whole name.
	manyCNAMEs := func(b *dnsmessage.Builder, name dnsmessage.Name) error {
		for i := 0; i < 4000; i++ {
			if err := b.CNAMEResource(rh(name), dnsmessage.CNAMEResource{CNAME: name}); err != nil {
				return err
			}
		}
		return nil
	}
	long := dnsmessage.MustNewName(strings.Repeat(strings.Repeat("a", 60)+".", 4))
	tests := []struct {
		name    string
		qname   dnsmessage.Name
		qtype   string
		answers func(*dnsmessage.Builder, dnsmessage.Name) error
		want    string
	}{
		{name: "long TXT", qname: dnsmessage.MustNewName("txt.test."), qtype: "TXT", answers: longTXT,
			want: `no answer contains "nope": answers are \x1b\x1b`},
		{name: "many long CNAMEs", qname: long, qtype: "CNAME", answers: manyCNAMEs,
			want: "… (3997 more)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := udpTestServer(t, func(q []byte) []byte { return hostileDNSReply(t, q, tt.answers) })
			hc := checkerTestHC(config.CheckDNS)
			hc.QueryName, hc.QueryType, hc.ExpectAnswer = tt.qname.String(), tt.qtype, "nope"
			hostileRun(t, checkerTestNew(t, hc), srv, 2*time.Second, tt.want)
		})
	}
}

// TestUDPCheckHostileServer: the largest reply, of control characters,
// fails an expect without being quoted, from the pooled buffer.
func TestUDPCheckHostileServer(t *testing.T) {
	srv := udpTestServer(t, func([]byte) []byte { return bytes.Repeat([]byte{0x1b}, 65507) })
	hc := checkerTestHC(config.CheckUDP)
	hc.Payload, hc.Expect = []byte("ping"), []byte("pong")
	hostileRun(t, checkerTestNew(t, hc), srv, 2*time.Second, `reply does not contain "pong"`)
}

// TestExecCheckHostileOutput: a command that floods stdout or stderr
// fails with the start of its stderr, in bounded memory.
func TestExecCheckHostileOutput(t *testing.T) {
	dir, _ := execTestDirs(t)
	tests := []struct{ name, script, want string }{
		{name: "endless stderr line", script: "head -c 20000000 /dev/zero | tr '\\0' '\\033' >&2\nexit 1",
			want: "exit status 1: " + strings.Repeat(`\x1b`, outsideMax/4) + "…(4096+ bytes)"},
		{name: "flood of stdout", script: "head -c 20000000 /dev/zero\necho done >&2\nexit 1", want: "exit status 1: done"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hc := checkerTestHC(config.CheckExec)
			hc.Command = []string{execTestScript(t, dir, strings.ReplaceAll(tt.name, " ", "-"), tt.script)}
			hostileRun(t, checkerTestNew(t, hc), netip.MustParseAddrPort("192.0.2.10:80"), 10*time.Second, tt.want)
		})
	}
}
