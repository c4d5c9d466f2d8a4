package topo

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Netns is a named network namespace (/run/netns/Name) made for one test.
// Commands run in it with `ip netns exec`, so any program on PATH (ipvsadm,
// ipset, iptables, lbd) sees the namespace as its whole network.
type Netns struct {
	Name string
}

// cmdTimeout bounds every command a test runs; generous because the tests
// may run under an emulator.
const cmdTimeout = 2 * time.Minute

// Exec runs a program in the namespace and returns its combined output.
// The error, if any, names the namespace, the command and its output.
func (n *Netns) Exec(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := n.Command(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("in netns %s: %s: %w\n%s", n.Name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// MustExec is Exec that ends the test on failure.
func (n *Netns) MustExec(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.Exec(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Command returns an exec.Cmd that runs args in the namespace.
func (n *Netns) Command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name}, args...)...)
}

// ip runs `ip -n NAME args...` (iproute2 switches namespaces itself: one
// process instead of two).
func (n *Netns) ip(args ...string) error {
	return runIP(append([]string{"-n", n.Name}, args...)...)
}

// Sysctl sets a sysctl inside the namespace, e.g.
// Sysctl("net.ipv4.ip_forward", "1").
func (n *Netns) Sysctl(key, value string) error {
	_, err := n.runSelf(roleSysctl, key+"="+value)
	return err
}

// runSelf runs this test binary in the namespace in one of its helper roles
// (see RunRoleIfAny) and waits for it.
func (n *Netns) runSelf(role string, args ...string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := n.Command(ctx, append([]string{self}, args...)...)
	cmd.Env = append(os.Environ(), RoleEnv+"="+role)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return string(out), fmt.Errorf("in netns %s: role %s %s: %w: %s", n.Name, role, strings.Join(args, " "), err, bytes.TrimSpace(stderr))
	}
	return string(out), nil
}

// HTTP sends one HTTP request from inside the namespace and returns the
// response body; body "" sends none.
func (n *Netns) HTTP(method, url, body string) (string, error) {
	args := []string{method, url}
	if body != "" {
		args = append(args, body)
	}
	return n.runSelf(roleHTTP, args...)
}

// Process is a long-running program started in a namespace. It is stopped
// when the test ends.
type Process struct {
	Name   string // for messages: "backend rs1"
	cmd    *exec.Cmd
	done   chan struct{}
	err    error // set when done is closed
	output syncBuffer
}

// Output returns what the process has printed so far (stderr and stdout).
func (p *Process) Output() string { return p.output.String() }

// OutputSince returns what the process printed after the first mark bytes
// of its output, and the output's length so far: the mark of the next
// call. Watching a long-running program this way copies only what is new.
func (p *Process) OutputSince(mark int) (string, int) { return p.output.since(mark) }

// Pid is the process's id: the program's own, as `ip netns exec` execs it
// in place.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// since returns what was written after the first mark bytes, and the
// length so far (the next mark).
func (b *syncBuffer) since(mark int) (string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.buf.Len()
	if mark >= n {
		return "", n
	}
	return string(b.buf.Bytes()[max(mark, 0):]), n
}

// Stop ends the process (SIGTERM, then SIGKILL after a grace period) and
// waits for it. Safe to call more than once.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Signal sends a signal to the process (e.g. SIGHUP to make lbd reload).
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Start starts a long-running program (lbd, a Consul agent, ...) in the
// namespace and returns at once; poll for its readiness. Its output is
// kept (see Process.Output) and logged if the test fails; it is stopped
// when the test ends.
func (n *Netns) Start(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	return n.start(t, name, nil, args, false)
}

// readyLine is what a helper role prints on stdout once it serves.
const readyLine = "READY"

// startSelf starts this test binary in the namespace in a helper role and
// waits until it prints readyLine.
func (n *Netns) startSelf(t testing.TB, name, role string, args ...string) *Process {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return n.start(t, name, []string{RoleEnv + "=" + role}, append([]string{self}, args...), true)
}

func (n *Netns) start(t testing.TB, name string, env, args []string, waitReady bool) *Process {
	t.Helper()
	p := &Process{Name: name, done: make(chan struct{})}
	p.cmd = n.Command(context.Background(), args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.output
	// Children that inherit the output pipes must not keep Wait from returning.
	p.cmd.WaitDelay = 5 * time.Second
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s in netns %s: %v", name, n.Name, err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			if waitReady && !signalled && sc.Text() == readyLine {
				close(ready)
				signalled = true
				continue
			}
			fmt.Fprintln(&p.output, sc.Text())
		}
		_, _ = io.Copy(&p.output, stdout) // after an over-long line
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("output of %s (netns %s):\n%s", name, n.Name, p.Output())
		}
	})
	if !waitReady {
		return p
	}
	select {
	case <-ready:
		return p
	case <-p.done:
		t.Fatalf("%s in netns %s exited before it was ready: %v\n%s", name, n.Name, p.err, p.Output())
	case <-time.After(cmdTimeout):
		t.Fatalf("%s in netns %s not ready after %v\n%s", name, n.Name, cmdTimeout, p.Output())
	}
	return nil
}
