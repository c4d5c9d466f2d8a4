package healthcheck

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// httpTestHandler serves the paths the HTTP tests check.
func httpTestHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "all is ok\n")
	})
	mux.HandleFunc("/status/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, _ := strconv.Atoi(r.PathValue("code"))
		w.WriteHeader(code)
		io.WriteString(w, "status "+r.PathValue("code"))
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status/500", http.StatusFound)
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "host="+r.Host+" from="+r.RemoteAddr+" path="+r.URL.RequestURI()+" ua="+r.UserAgent())
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "start ")
		io.WriteString(w, strings.Repeat("x", 100<<10))
		io.WriteString(w, " needle")
	})
	mux.HandleFunc("/chunked", func(w http.ResponseWriter, r *http.Request) {
		// The needle arrives split across chunks and packets.
		for _, part := range []string{"hay hay ne", "ed", "le hay"} {
			io.WriteString(w, part)
			w.(http.Flusher).Flush()
			time.Sleep(10 * time.Millisecond)
		}
	})
	mux.HandleFunc("/early-hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusNoContent)
	})
	// slow answers after ?d= (default 3 s); stall sends the headers and
	// then stalls in the body. Both give up when the checker goes away.
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.FormValue("d"))
		if err != nil {
			d = 3 * time.Second
		}
		select {
		case <-time.After(d):
			io.WriteString(w, "all is ok\n")
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/stall", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first part, ")
		w.(http.Flusher).Flush()
		select {
		case <-time.After(3 * time.Second):
			io.WriteString(w, "all is ok\n")
		case <-r.Context().Done():
		}
	})
	return mux
}

// httpTestServer starts an HTTP server on loopback and returns its address.
func httpTestServer(t testing.TB) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(httpTestHandler())
	t.Cleanup(srv.Close)
	return checkerTestAddr(srv.Listener.Addr())
}

// httpTestSilent returns the address of a server that accepts connections
// and never answers.
func httpTestSilent(t testing.TB) netip.AddrPort {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	l := tcpTestServe(t, "127.0.0.1", func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns = append(conns, c)
	})
	return checkerTestAddr(l.Addr())
}

func TestHTTPCheck(t *testing.T) {
	t.Parallel()
	srv := httpTestServer(t)
	silent := httpTestSilent(t)
	port := strconv.Itoa(int(srv.Port()))
	tests := []struct {
		name    string
		path    string
		host    string
		status  []config.StatusRange
		body    string
		target  netip.AddrPort
		timeout time.Duration
		want    string
	}{
		{name: "200", path: "/ok", want: ""},
		{name: "body found", path: "/ok", body: "is ok", want: ""},
		{name: "body not found", path: "/ok", body: "not ok", want: `body does not contain "not ok"`},
		{name: "503", path: "/status/503", want: "HTTP 503"},
		{name: "404", path: "/nowhere", want: "HTTP 404"},
		{name: "204 in default range", path: "/status/204", want: ""},
		{name: "399 in default range", path: "/status/399", want: ""},
		{name: "400 not in default range", path: "/status/400", want: "HTTP 400"},
		{name: "503 expected", path: "/status/503", status: []config.StatusRange{{Min: 503, Max: 503}}, want: ""},
		{name: "200 not expected", path: "/ok", status: []config.StatusRange{{Min: 503, Max: 503}}, want: "HTTP 200"},
		{name: "second range", path: "/status/418", status: []config.StatusRange{{Min: 200, Max: 200}, {Min: 400, Max: 499}}, want: ""},
		{name: "between ranges", path: "/status/302", status: []config.StatusRange{{Min: 200, Max: 299}, {Min: 400, Max: 499}}, want: "HTTP 302"},
		// A redirect is a status like any other: never followed.
		{name: "redirect accepted", path: "/redirect", want: ""},
		{name: "redirect not followed", path: "/redirect", status: []config.StatusRange{{Min: 200, Max: 200}}, want: "HTTP 302"},
		{name: "redirect body not followed", path: "/redirect", status: []config.StatusRange{{Min: 302, Max: 302}}, body: "status 500", want: "body does not contain"},
		{name: "wrong status wins over body", path: "/status/500", body: "status 500", want: "HTTP 500"},
		{name: "default host", path: "/echo", body: "host=127.0.0.1:" + port + " ", want: ""},
		{name: "host header", path: "/echo", host: "app.example", body: "host=app.example ", want: ""},
		{name: "query string", path: "/echo?probe=1&x=%20", body: "path=/echo?probe=1&x=%20 ", want: ""},
		{name: "user agent", path: "/echo", body: "ua=lbd-health-check", want: ""},
		{name: "body beyond 64 KiB", path: "/big", body: "needle", want: `first 64 KiB of body do not contain "needle"`},
		{name: "body within 64 KiB", path: "/big", body: "start xxx", want: ""},
		{name: "chunked body", path: "/chunked", body: "needle", want: ""},
		{name: "early hints skipped", path: "/early-hints", status: []config.StatusRange{{Min: 204, Max: 204}}, want: ""},
		{name: "slow server within timeout", path: "/slow?d=200ms", body: "all is ok", timeout: 2 * time.Second, want: ""},
		{name: "slow server", path: "/slow", timeout: 500 * time.Millisecond, want: "read response: timeout after 500ms"},
		{name: "slow body", path: "/stall", body: "all is ok", timeout: 500 * time.Millisecond, want: "read body: timeout after 500ms"},
		{name: "stalled body not read", path: "/stall", timeout: 500 * time.Millisecond, want: ""},
		{name: "never answers", path: "/", target: silent, timeout: 500 * time.Millisecond, want: "read response: timeout after 500ms"},
		{name: "closed port", path: "/", target: checkerTestClosedPort(t, "tcp"), want: "connect: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hc := checkerTestHC(config.CheckHTTP)
			hc.Path, hc.Host, hc.ExpectBody = tt.path, tt.host, tt.body
			if tt.status != nil {
				hc.ExpectStatus = tt.status
			}
			target, timeout := tt.target, tt.timeout
			if !target.IsValid() {
				target = srv
			}
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: target}, timeout)
			checkerTestWant(t, err, tt.want)
			t.Logf("%v after %s", err, elapsed)
		})
	}
}

// TestHTTPCheckSourceAddress: the request comes from source_address.
func TestHTTPCheckSourceAddress(t *testing.T) {
	t.Parallel()
	checkerTestHasAddr(t, "127.0.0.2")
	hc := checkerTestHC(config.CheckHTTP)
	hc.Path, hc.ExpectBody = "/echo", "from=127.0.0.2:"
	hc.SourceAddress = netip.MustParseAddr("127.0.0.2")
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: httpTestServer(t)}, 2*time.Second)
	checkerTestWant(t, err, "")
}

// TestHTTPCheckIgnoresProxy: proxy variables in lbd's environment do not
// send checks elsewhere. Not parallel: it sets the environment.
func TestHTTPCheckIgnoresProxy(t *testing.T) {
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer proxy.Close()
	for _, v := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"} {
		t.Setenv(v, proxy.URL)
	}
	t.Setenv("NO_PROXY", "")
	hc := checkerTestHC(config.CheckHTTP)
	hc.Path = "/ok"
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: httpTestServer(t)}, 2*time.Second)
	checkerTestWant(t, err, "")
}

// TestHTTPRequestHost: the default Host header is the target's address,
// with its port unless it is the scheme's default.
func TestHTTPRequestHost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ    config.CheckType
		target string
		want   string
	}{
		{config.CheckHTTP, "192.0.2.1:80", "Host: 192.0.2.1\r\n"},
		{config.CheckHTTP, "192.0.2.1:8080", "Host: 192.0.2.1:8080\r\n"},
		{config.CheckHTTP, "[2001:db8::1]:80", "Host: [2001:db8::1]\r\n"},
		{config.CheckHTTP, "[2001:db8::1]:443", "Host: [2001:db8::1]:443\r\n"},
		{config.CheckHTTPS, "192.0.2.1:443", "Host: 192.0.2.1\r\n"},
		{config.CheckHTTPS, "[2001:db8::1]:8443", "Host: [2001:db8::1]:8443\r\n"},
	}
	for _, tt := range tests {
		hc := checkerTestHC(tt.typ)
		hc.Path = "/healthz"
		c, err := newHTTPChecker(hc)
		if err != nil {
			t.Fatal(err)
		}
		req := string(c.request(netip.MustParseAddrPort(tt.target)))
		if !strings.HasPrefix(req, "GET /healthz HTTP/1.1\r\n"+tt.want) || !strings.HasSuffix(req, "\r\nConnection: close\r\n\r\n") {
			t.Errorf("%s %s: request %q; want the request line then %q", tt.typ, tt.target, req, tt.want)
		}
	}
}

// httpsTestServer starts an HTTPS server with httptest's self-signed
// certificate (for example.com and 127.0.0.1) and returns its address and
// a function returning the SNI of the last ClientHello.
func httpsTestServer(t testing.TB) (netip.AddrPort, func() (string, bool)) {
	t.Helper()
	var mu sync.Mutex
	var sni string
	var seen bool
	srv := httptest.NewUnstartedServer(httpTestHandler())
	srv.TLS = &tls.Config{GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		mu.Lock()
		defer mu.Unlock()
		sni, seen = hello.ServerName, true
		return nil, nil
	}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return checkerTestAddr(srv.Listener.Addr()), func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return sni, seen
	}
}

func TestHTTPSCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		verify     bool
		serverName string
		path       string
		body       string
		plain      bool // target a plain HTTP server
		silent     bool // target a server that never answers
		wantSNI    string
		want       string
	}{
		{name: "verify off", path: "/ok", body: "all is ok", want: ""},
		{name: "verify off with SNI", serverName: "example.com", path: "/ok", wantSNI: "example.com", want: ""},
		{name: "verify off wrong status", path: "/status/503", want: "HTTP 503"},
		{name: "verify on self-signed", verify: true, path: "/ok", want: "TLS handshake: tls: failed to verify certificate"},
		{name: "verify on self-signed with SNI", verify: true, serverName: "example.com", path: "/ok", wantSNI: "example.com", want: "certificate signed by unknown authority"},
		{name: "default host over TLS", path: "/echo", body: "host=127.0.0.1:", want: ""},
		{name: "TLS to a plain server", path: "/ok", plain: true, want: "TLS handshake"},
		{name: "no handshake", path: "/ok", silent: true, want: "TLS handshake: timeout after 500ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			target, sni := httpsTestServer(t)
			timeout := 2 * time.Second
			switch {
			case tt.plain:
				target = httpTestServer(t)
			case tt.silent:
				target, timeout = httpTestSilent(t), 500*time.Millisecond
			}
			hc := checkerTestHC(config.CheckHTTPS)
			hc.TLSVerify, hc.TLSServerName, hc.Path, hc.ExpectBody = tt.verify, tt.serverName, tt.path, tt.body
			err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: target}, timeout)
			checkerTestWant(t, err, tt.want)
			if tt.plain || tt.silent {
				return
			}
			// An IP address is never sent as SNI (RFC 6066).
			if got, seen := sni(); !seen || got != tt.wantSNI {
				t.Errorf("server saw SNI %q (ClientHello seen: %t); want %q", got, seen, tt.wantSNI)
			}
		})
	}
}

func BenchmarkHTTPCheck(b *testing.B) {
	hc := checkerTestHC(config.CheckHTTP)
	hc.ExpectBody = "ok"
	c := checkerTestNew(b, hc)
	checkerTestBench(b, c, checkerTestHelper(b, "http"))
}
