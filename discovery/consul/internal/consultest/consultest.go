// Package consultest runs real Consul agents for tests: `consul agent -dev`
// on 127.0.0.1 with free ports and its own data directory, stopped when the
// test ends. The binary comes from $LBD_CONSUL, or else from the repository's
// scripts/consul.sh, which builds and caches it the first time. A missing
// binary fails the test: Consul tests are never skipped.
package consultest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/internal/syncbuf"

	"github.com/hashicorp/consul/api"
)

// startTimeout bounds how long an agent may take to elect itself leader and
// answer; a -dev agent takes about two seconds.
const startTimeout = 60 * time.Second

// Options configure an agent.
type Options struct {
	// ACL enables ACLs with default policy deny. Agent.Token is then the
	// initial management token, also used as the agent's own token.
	ACL bool
	// HCL is more agent configuration, such as
	// `limits { http_max_conns_per_client = 20 }`.
	HCL string
	// HTTPS opens an HTTPS port too (see Agent.HTTPSAddr); HCL must then
	// give the agent its certificate (a tls { defaults { ... } } block).
	HTTPS bool
}

// Agent is a running (or stopped) Consul agent.
type Agent struct {
	// Token is the management token of an ACL-enabled agent, else "".
	Token string

	t     testing.TB
	opts  Options
	bin   string
	dir   string
	http  int // kept across restarts: clients keep their address
	https int // 0 without Options.HTTPS

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
	out  *syncBuffer
}

// Binary returns the path of the Consul binary tests use: $LBD_CONSUL, or
// what the repository's scripts/consul.sh prints (it may build Consul, about
// five minutes the first time).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("LBD_CONSUL"); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("LBD_CONSUL=%s is not an executable file (err %v)", p, err)
		}
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("finding the repository for scripts/consul.sh: %v; set LBD_CONSUL to a Consul binary", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "consul.sh"))
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("no Consul binary for the tests: scripts/consul.sh failed: %v\n%s\nSet LBD_CONSUL to a Consul binary to use one.", err, stderr.String())
	}
	p := strings.TrimSpace(stdout.String())
	if p == "" {
		t.Fatalf("no Consul binary for the tests: scripts/consul.sh printed no path\n%s", stderr.String())
	}
	return p
}

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Start starts an agent and waits until it is leader and answers. The
// agent is stopped when the test ends.
func Start(t testing.TB, opts Options) *Agent {
	t.Helper()
	a := &Agent{t: t, opts: opts, bin: Binary(t), dir: t.TempDir()}
	if opts.ACL {
		a.Token = uuid(t)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("consul agent output (tail):\n%s", a.outputTail())
		}
		a.Stop()
	})
	if err := a.launch(); err != nil {
		t.Fatalf("starting consul agent: %v\n%s", err, a.outputTail())
	}
	return a
}

// launch configures and starts the agent, keeping its HTTP port once it
// has one. A free port can be taken between choosing and binding it, and a
// port an agent just released can stay unusable for a while (connections
// lingering in the kernel): the other ports are chosen anew on each try.
func (a *Agent) launch() error {
	var err error
	for try := range 5 {
		time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		if err = a.configure(); err != nil {
			return err
		}
		if err = a.start(); err == nil {
			return nil
		}
		a.Stop()
	}
	return err
}

// configure chooses ports and writes the agent's configuration.
func (a *Agent) configure() error {
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	if a.opts.HTTPS && a.https == 0 {
		a.https = ports[4]
	}
	if a.http == 0 {
		a.http = ports[0]
	}
	ports[0] = a.http
	var b strings.Builder
	https := -1
	if a.opts.HTTPS {
		https = a.https
	}
	fmt.Fprintf(&b, "ports {\n  http = %d\n  https = %d\n  dns = -1\n  serf_lan = %d\n  serf_wan = %d\n  server = %d\n  grpc = -1\n  grpc_tls = -1\n}\n",
		ports[0], https, ports[1], ports[2], ports[3])
	if a.opts.ACL {
		fmt.Fprintf(&b, "acl {\n  enabled = true\n  default_policy = \"deny\"\n  tokens {\n    initial_management = %q\n    agent = %q\n  }\n}\n", a.Token, a.Token)
	}
	b.WriteString(a.opts.HCL)
	b.WriteString("\n")
	return os.WriteFile(filepath.Join(a.dir, "agent.hcl"), []byte(b.String()), 0o600)
}

// start runs the agent with the configuration written and waits for it.
func (a *Agent) start() error {
	cmd := exec.Command(a.bin, "agent", "-dev",
		"-bind", "127.0.0.1", "-client", "127.0.0.1",
		"-data-dir", filepath.Join(a.dir, "data"),
		"-config-file", filepath.Join(a.dir, "agent.hcl"),
		"-log-level", "info")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	// The kernel's parent-death signal follows the thread that started the
	// process, not the process: start and wait for it on one locked thread,
	// which Go ends only after the agent has exited.
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("running %s: %w", a.bin, err)
	}
	a.mu.Lock()
	a.cmd, a.done, a.out = cmd, done, out
	a.mu.Unlock()
	return a.waitReady(done)
}

// waitReady waits until the agent has a leader, its node is in the catalog
// and, with ACLs, the management token works.
func (a *Agent) waitReady(done <-chan struct{}) error {
	c := a.Client(a.Token)
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return errors.New("consul agent exited")
		default:
		}
		last = func() error {
			leader, err := c.Status().Leader()
			if err != nil {
				return err
			}
			if leader == "" {
				return errors.New("no leader yet")
			}
			nodes, _, err := c.Catalog().Nodes(nil)
			if err != nil {
				return err
			}
			if len(nodes) == 0 {
				return errors.New("agent's node not in the catalog yet")
			}
			return nil
		}()
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("consul agent not ready after %v: %v", startTimeout, last)
}

// HTTPSAddr is the agent's HTTPS address, host:port (Options.HTTPS).
func (a *Agent) HTTPSAddr() string { return fmt.Sprintf("127.0.0.1:%d", a.https) }

// Addr is the agent's HTTP address, host:port.
func (a *Agent) Addr() string { return fmt.Sprintf("127.0.0.1:%d", a.http) }

// Client returns a plain consul/api client of the agent for the test's own
// requests, with token ("" for none). Its connections are not pooled, so
// they do not count against the agent's per-client limit between requests.
func (a *Agent) Client(token string) *api.Client {
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = a.Addr()
	cfg.Token = token
	c, err := api.NewClient(cfg)
	if err != nil {
		a.t.Fatalf("consul client: %v", err)
	}
	return c
}

// Stop stops the agent (SIGTERM, then SIGKILL after 10 s) and waits for it.
// Stopping a stopped agent does nothing.
func (a *Agent) Stop() {
	a.mu.Lock()
	cmd, done := a.cmd, a.done
	a.cmd = nil
	a.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart stops the agent and starts it again on the same HTTP port (its
// internal ports may change). A -dev agent keeps no catalog: its server
// state and indexes start anew, but the agent registers again the services
// and checks registered through it, which it keeps in its data directory
// (TTL checks come back critical).
func (a *Agent) Restart() {
	a.t.Helper()
	a.Stop()
	if err := a.launch(); err != nil {
		a.t.Fatalf("restarting consul agent: %v\n%s", err, a.outputTail())
	}
}

// RestartClean is Restart with the data directory removed first: an agent
// that lost everything, including the services registered through it.
func (a *Agent) RestartClean() {
	a.t.Helper()
	a.Stop()
	if err := os.RemoveAll(filepath.Join(a.dir, "data")); err != nil {
		a.t.Fatalf("removing the agent's data directory: %v", err)
	}
	if err := a.launch(); err != nil {
		a.t.Fatalf("restarting consul agent: %v\n%s", err, a.outputTail())
	}
}

func (a *Agent) outputTail() string {
	a.mu.Lock()
	out := a.out
	a.mu.Unlock()
	if out == nil {
		return ""
	}
	s := out.String()
	if len(s) > 8000 {
		s = "..." + s[len(s)-8000:]
	}
	return s
}

// freePorts returns n distinct ports free for both TCP and UDP on
// 127.0.0.1 (Serf uses both). They are chosen at random below the kernel's
// ephemeral range: a port the kernel hands out for :0 or to an outgoing
// connection could be taken again while the agent restarts, and tests make
// many short connections.
func freePorts(n int) ([]int, error) {
	lo, hi := 10000, ephemeralStart()-1
	if hi-lo < 1000 {
		return nil, fmt.Errorf("no room for test ports below the ephemeral range (starts at %d)", hi+1)
	}
	var ports []int
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("no free ports found")
		}
		p := lo + mrand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		closers = append(closers, l.Close)
		u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		closers = append(closers, u.Close)
		ports = append(ports, p)
	}
	return ports, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768 // Linux's default
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(data), &lo, &hi); err != nil {
		return 32768
	}
	return lo
}

func uuid(t testing.TB) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random token: %v", err)
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// syncBuffer is a log sink the goroutines under test may write.
type syncBuffer = syncbuf.Buffer
