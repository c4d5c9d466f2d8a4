package topo

// The programs that run on the topology's hosts are this same test binary,
// re-executed in a namespace with RoleEnv set: TestMain calls RunRoleIfAny
// first, which runs the role and exits. No other binaries are needed.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RoleEnv names the environment variable that selects a helper role.
const RoleEnv = "LBD_E2E_ROLE"

const (
	roleBackend = "backend"
	roleProbe   = "probe"
	roleSysctl  = "sysctl"
	roleHTTP    = "http"
)

// RunRoleIfAny runs the helper role named by RoleEnv and exits; it returns
// at once when RoleEnv is not set. Call it first thing in TestMain.
func RunRoleIfAny() {
	role := os.Getenv(RoleEnv)
	if role == "" {
		return
	}
	var err error
	switch role {
	case roleBackend:
		err = runBackend(os.Args[1:])
	case roleProbe:
		err = runProbe(os.Args[1:])
	case roleSysctl:
		err = runSysctl(os.Args[1:])
	case roleHTTP:
		err = runHTTP(os.Args[1:])
	case roleHold:
		err = runHold(os.Args[1:])
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", RoleEnv, role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runHTTP sends one request (METHOD URL [BODY]) and prints the response
// body; a status other than 2xx is an error. Tests use it to talk to a
// Consul agent listening on a namespace's loopback.
func runHTTP(args []string) error {
	if len(args) < 2 || len(args) > 3 {
		return fmt.Errorf("usage: METHOD URL [BODY]")
	}
	var body io.Reader
	if len(args) == 3 {
		body = strings.NewReader(args[2])
	}
	req, err := http.NewRequest(args[0], args[1], body)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", args[0], args[1], resp.Status, strings.TrimSpace(string(b)))
	}
	_, err = os.Stdout.Write(b)
	return err
}

// runSysctl writes key=value pairs to /proc/sys of the current namespace.
func runSysctl(args []string) error {
	for _, kv := range args {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return fmt.Errorf("want key=value, got %q", kv)
		}
		path := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
		if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runBackend is a real server: it answers every HTTP request and every UDP
// datagram with its id and the client address it saw, as one line
// "id=ID client=IP:PORT". GET /healthz answers "ok"; POST /upload adds
// " bytes=N", the body's length; GET /size/N answers N bytes. On -push it speaks
// first (servePush).
func runBackend(args []string) error {
	fs := flag.NewFlagSet(roleBackend, flag.ContinueOnError)
	id := fs.String("id", "", "server id put in every answer")
	httpAddr := fs.String("http", "", "HTTP listen address (empty: none)")
	udpAddr := fs.String("udp", "", "UDP listen address (empty: none)")
	pushAddr := fs.String("push", "", "server-first TCP listen address (empty: none)")
	sctpPort := fs.Int("sctp", 0, "SCTP port, every address (0: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("-id is required")
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	errc := make(chan error, 4)

	if *httpAddr != "" {
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return err
		}
		mux := backendMux(*id)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
		go func() { errc <- srv.Serve(ln) }()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	}
	if *udpAddr != "" {
		pc, err := net.ListenPacket("udp", *udpAddr)
		if err != nil {
			return err
		}
		go func() { errc <- serveUDP(pc, *id) }()
		go func() { <-ctx.Done(); _ = pc.Close() }()
	}
	if *pushAddr != "" {
		ln, err := net.Listen("tcp", *pushAddr)
		if err != nil {
			return err
		}
		go func() { errc <- servePush(ln, *id, PushEvery) }()
		go func() { <-ctx.Done(); _ = ln.Close() }()
	}
	if *sctpPort != 0 {
		ln, err := sctpListen(*sctpPort)
		if err != nil {
			return err
		}
		go func() { errc <- serveSCTP(ln, *id) }()
		go func() { <-ctx.Done(); _ = ln.Close() }()
	}

	fmt.Println(readyLine)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
}

// backendMux is a backend's HTTP handler: its id and the client address
// it saw on every request, and the test endpoints below.
func backendMux(id string) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	// POST /upload reads the whole body: a test of full-size packets
	// towards the real server (a tunnel's MTU) sees how much arrived.
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "id=%s client=%s bytes=%d\n", id, r.RemoteAddr, n)
	})
	// GET /size/N answers N bytes (at most 16 MiB): a fixed response
	// size for throughput benchmarks.
	mux.HandleFunc("GET /size/{n}", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n > 16<<20 {
			http.Error(w, "size: expected 0..16777216", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		chunk := bytes.Repeat([]byte("x"), min(n, 64<<10))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "id=%s client=%s\n", id, r.RemoteAddr)
	})
	return mux
}

func serveUDP(pc net.PacketConn, id string) error {
	buf := make([]byte, 64*1024)
	for {
		_, from, err := pc.ReadFrom(buf)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(writerTo{pc, from}, "id=%s client=%s\n", id, from); err != nil {
			return err
		}
	}
}

type writerTo struct {
	pc net.PacketConn
	to net.Addr
}

func (w writerTo) Write(b []byte) (int, error) { return w.pc.WriteTo(b, w.to) }

// runProbe is a client: it sends -n requests (HTTP GET / over a new TCP
// connection each, one UDP datagram from a new socket each, or a new SCTP
// association each) to -target
// and prints one line per request: "answer <body>" or "error <reason>";
// with -every, paced (runPaced).
func runProbe(args []string) error {
	fs := flag.NewFlagSet(roleProbe, flag.ContinueOnError)
	proto := fs.String("proto", "http", "http, udp or sctp")
	target := fs.String("target", "", "IP:PORT to send to")
	n := fs.Int("n", 1, "number of requests")
	timeout := fs.Duration("timeout", 5*time.Second, "per-request timeout")
	every := fs.Duration("every", 0, "start a request this often, without waiting for the previous one (0: one after another)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *target == "" {
		return errors.New("-target is required")
	}
	var once func() (string, error)
	switch *proto {
	case "http":
		client := &http.Client{
			Timeout: *timeout,
			// A new connection per request (so IPVS schedules each one); a
			// zero Transport also ignores any HTTP_PROXY setting.
			Transport: &http.Transport{DisableKeepAlives: true},
		}
		url := "http://" + *target + "/"
		once = func() (string, error) { return httpGet(client, url) }
	case "udp":
		once = func() (string, error) { return udpAsk(*target, *timeout) }
	case "sctp":
		once = func() (string, error) { return sctpAsk(*target, *timeout) }
	default:
		return fmt.Errorf("unknown -proto %q", *proto)
	}
	if *every > 0 {
		return runPaced(*n, *every, once)
	}
	for i := 0; i < *n; i++ {
		body, err := once()
		if err != nil {
			fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Printf("answer %s\n", strings.TrimSpace(body))
	}
	return nil
}

func httpGet(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return string(body), nil
}

func udpAsk(target string, timeout time.Duration) (string, error) {
	conn, err := net.DialTimeout("udp", target, timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
