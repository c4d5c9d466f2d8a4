package healthcheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
)

const (
	// httpMaxHead bounds the status line and headers of a response,
	// informational ones included: far more than servers send (nginx
	// proxies no more than 4 or 8 KiB of them by default), and bounded
	// memory against one that never ends its headers.
	httpMaxHead = 16 << 10
	// httpMaxBody bounds how much of a body is searched for expect_body.
	httpMaxBody = 64 << 10
	// httpMaxFraming is what reading httpMaxBody of a body may take from
	// the connection beyond it, for chunk sizes, extensions and trailers:
	// net/http lets extensions take some 16 bytes per byte of data.
	httpMaxFraming = 16 << 10
)

// httpChecker sends one GET per check on a fresh connection and judges the
// status and, optionally, the body.
//
// It speaks HTTP/1.1 itself rather than through net/http's Client: a check
// wants exactly one request on one new connection from a chosen address,
// no proxy, no redirects, no connection pool and no background goroutines,
// which is everything Client adds. net/http still parses the response.
type httpChecker struct {
	dialer  *net.Dialer
	local   netip.AddrPort
	timeout time.Duration
	tls     *tls.Config // nil for plain HTTP
	// tlsPerTarget: verification is on without tls_server_name, so each
	// target's certificate is verified against its own address.
	tlsPerTarget bool

	// The request is reqHead + Host + reqTail; with a fixed host header,
	// req is the whole request, shared by every check.
	reqHead, reqTail, req []byte
	defaultPort           uint16 // the scheme's port, left out of a default Host header

	status []config.StatusRange
	body   []byte // expect_body; empty: the body is not read

	readers sync.Pool // *httpReader, to keep 4 KiB of garbage out of each check
}

// httpReader reads a response through its caps.
type httpReader struct {
	capped httpCapReader
	br     *bufio.Reader // reads from capped
}

// httpCapReader passes reads on to r until left bytes have been read, then
// fails them with a capError: net/http reads a status line and headers
// for as long as they last.
type httpCapReader struct {
	r    io.Reader
	left int
	head bool      // reading the status line and headers
	line bool      // a line has ended: the status line is read
	over *capError // the cap was reached
}

// limit lets through left bytes more, of the head or of the body.
func (c *httpCapReader) limit(head bool, left int) { c.head, c.left = head, left }

// reason is the error to report for err, which reading through c
// returned: the cap, when it was reached, whatever the parser made of the
// line it cut (bufio's ReadLine hands a cut last line on as a whole one).
func (c *httpCapReader) reason(err error) error {
	if c.over != nil {
		return c.over
	}
	return err
}

func (c *httpCapReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		switch {
		case c.head && !c.line:
			c.over = &capError{what: "status line", verb: "exceeds", limit: httpMaxHead}
		case c.head:
			c.over = &capError{what: "response headers", verb: "exceed", limit: httpMaxHead}
		default:
			c.over = &capError{what: "response body with its framing", verb: "exceeds", limit: httpMaxBody + httpMaxFraming}
		}
		return 0, c.over
	}
	n, err := c.r.Read(p[:min(len(p), c.left)])
	c.left -= n
	if c.head && !c.line && bytes.IndexByte(p[:n], '\n') >= 0 {
		c.line = true
	}
	return n, err
}

func newHTTPChecker(hc config.HealthCheck) (*httpChecker, error) {
	path := hc.Path
	if path == "" {
		path = "/"
	}
	if path[0] != '/' || !httpValidToken(path) {
		return nil, fmt.Errorf("path %s is not a request path: it must start with '/' and hold only printable ASCII without spaces (percent-encode the rest)", checkerQuote(path))
	}
	if hc.Host != "" && !httpValidToken(hc.Host) {
		return nil, fmt.Errorf("host %s is not a valid Host header", checkerQuote(hc.Host))
	}
	c := &httpChecker{
		dialer:      checkerDialer(),
		local:       checkerLocal(hc),
		timeout:     checkerTimeout(hc),
		defaultPort: 80,
		status:      hc.ExpectStatus,
		body:        []byte(hc.ExpectBody),
	}
	if len(c.status) == 0 {
		c.status = []config.StatusRange{{Min: 200, Max: 399}}
	}
	c.readers.New = func() any {
		r := &httpReader{}
		r.br = bufio.NewReaderSize(&r.capped, 4096)
		return r
	}
	if hc.Type == config.CheckHTTPS {
		c.defaultPort = 443
		c.tls = &tls.Config{
			ServerName:         hc.TLSServerName,
			InsecureSkipVerify: !hc.TLSVerify, // the admin's choice: tls_verify = false
			// A check must see the server do a full handshake, so no
			// session cache; HTTP/1.1 is all this client speaks.
			NextProtos: []string{"http/1.1"},
		}
		c.tlsPerTarget = hc.TLSVerify && hc.TLSServerName == ""
	}
	c.reqHead = []byte("GET " + path + " HTTP/1.1\r\nHost: ")
	c.reqTail = []byte("\r\nUser-Agent: lbd-health-check\r\nAccept: */*\r\nConnection: close\r\n\r\n")
	if hc.Host != "" {
		c.req = slices.Concat(c.reqHead, []byte(hc.Host), c.reqTail)
	}
	return c, nil
}

// httpValidToken reports whether s is non-empty printable ASCII without
// spaces, so that it cannot break the request line or inject a header.
func httpValidToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return s != ""
}

func (c *httpChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, deadline := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	tcp, err := tcpDial(ctx, c.dialer, c.local, raddr)
	if err != nil {
		return checkerErr(ctx, start, "connect", err)
	}
	// Closing the TCP connection also abandons the TLS session and the
	// response body: nothing else holds the connection, and there is no
	// pool to return it to.
	defer tcpClose(tcp)
	stop, err := checkerWatch(ctx, tcp, deadline)
	if err != nil {
		return checkerErr(ctx, start, "connect", err)
	}
	defer stop()

	var conn net.Conn = tcp
	if c.tls != nil {
		cfg := c.tls
		if c.tlsPerTarget {
			cfg = cfg.Clone()
			cfg.ServerName = raddr.Addr().WithZone("").String()
		}
		tc := tls.Client(tcp, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			return checkerErr(ctx, start, "TLS handshake", err)
		}
		conn = tc
	}

	req := c.req
	if req == nil {
		req = c.request(raddr)
	}
	if _, err := conn.Write(req); err != nil {
		return checkerErr(ctx, start, "send request", err)
	}

	r := c.readers.Get().(*httpReader)
	r.capped = httpCapReader{r: conn}
	r.br.Reset(&r.capped)
	defer func() {
		r.capped = httpCapReader{}
		r.br.Reset(&r.capped)
		c.readers.Put(r)
	}()
	r.capped.limit(true, httpMaxHead)
	resp, err := httpReadResponse(r.br)
	if err != nil {
		return checkerErr(ctx, start, "read response", r.capped.reason(err))
	}
	if !c.statusOK(resp.StatusCode) {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if len(c.body) == 0 {
		return nil
	}
	r.capped.limit(false, httpMaxBody+httpMaxFraming)
	found, whole, err := httpBodyContains(resp.Body, c.body)
	switch {
	case err != nil:
		return checkerErr(ctx, start, "read body", r.capped.reason(err))
	case !found && !whole:
		return fmt.Errorf("first %d KiB of body do not contain %s", httpMaxBody>>10, checkerQuote(string(c.body)))
	case !found:
		return fmt.Errorf("body does not contain %s", checkerQuote(string(c.body)))
	}
	return nil
}

// request builds the request with the default Host header: the target's
// address, with its port unless it is the scheme's.
func (c *httpChecker) request(raddr netip.AddrPort) []byte {
	req := make([]byte, 0, len(c.reqHead)+len("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535")+len(c.reqTail))
	req = append(req, c.reqHead...)
	a := raddr.Addr().WithZone("")
	switch {
	case raddr.Port() != c.defaultPort:
		req = netip.AddrPortFrom(a, raddr.Port()).AppendTo(req)
	case a.Is6():
		req = append(a.AppendTo(append(req, '[')), ']')
	default:
		req = a.AppendTo(req)
	}
	return append(req, c.reqTail...)
}

func (c *httpChecker) statusOK(code int) bool {
	for _, r := range c.status {
		if r.Contains(code) {
			return true
		}
	}
	return false
}

// httpReadResponse reads the final response, skipping informational ones
// (100 Continue, 103 Early Hints) that may precede it.
func httpReadResponse(br *bufio.Reader) (*http.Response, error) {
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// httpBodyContains reads body until it finds want or has read httpMaxBody;
// whole is false when it stopped there. It never closes body: closing a
// response body that ReadResponse made reads it to the end, and the caller
// closes the connection instead.
func httpBodyContains(body io.Reader, want []byte) (found, whole bool, err error) {
	buf := make([]byte, 0, 4096)
	for len(buf) < httpMaxBody {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, min(cap(buf), httpMaxBody-len(buf)))
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), httpMaxBody)])
		// Search only where the new bytes can complete a match.
		from := max(0, len(buf)-len(want)+1)
		buf = buf[:len(buf)+n]
		if bytes.Contains(buf[from:], want) {
			return true, true, nil
		}
		if errors.Is(err, io.EOF) {
			return false, true, nil
		}
		if err != nil {
			return false, false, err
		}
	}
	return false, false, nil
}
