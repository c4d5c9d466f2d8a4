package iptables

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// ExecRunner runs the iptables tools of one family and backend.
type ExecRunner struct {
	save, restore string // binaries, e.g. iptables-nft-save
	family        int
	prefix        []string
	children      *Children // nil: not recorded
}

// Children remembers the process ids of the latest iptables-restore runs
// of the runners that record into it, so that the nftables transactions
// they commit (each names its process) are known as lbd's own. It is safe
// for concurrent use.
type Children struct {
	mu   sync.Mutex
	pids [childrenKept]int
	next int
}

// childrenKept bounds what Children remembers: a sync runs at most one
// restore per table and family, and the drift watcher reads a transaction
// milliseconds after it commits, long before 64 more restores ran; the
// kernel hands out process ids in turn, so an old one comes back only
// after millions of others.
const childrenKept = 64

func (c *Children) add(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pids[c.next] = pid
	c.next = (c.next + 1) % len(c.pids)
}

// Started reports whether pid is one of the latest restore processes
// started by a runner recording into c.
func (c *Children) Started(pid int) bool {
	if pid <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pids {
		if p == pid {
			return true
		}
	}
	return false
}

// Recording returns a copy of the runner that records the process id of
// every iptables-restore it starts in c, before the tool reads its input
// and so before it can commit anything.
func (r *ExecRunner) Recording(c *Children) *ExecRunner {
	cp := *r
	cp.children = c
	return &cp
}

// InNetns makes the runner work in a named network namespace (tests, and
// tools inspecting a director namespace).
func (r *ExecRunner) InNetns(name string) *ExecRunner {
	c := *r
	c.prefix = []string{"ip", "netns", "exec", name}
	return &c
}

// Backend names an iptables backend.
type Backend string

const (
	NFT    Backend = "nft"
	Legacy Backend = "legacy"
)

// Detect picks the backend the host's firewall uses, as kube-proxy does:
// the one whose tables hold more rules (a host firewall written with
// iptables-legacy must keep seeing lbd's rules beside its own); nft when
// both are empty or only one is installed.
func Detect() Backend {
	count := func(bin string) int {
		if _, err := exec.LookPath(bin); err != nil {
			return -1
		}
		out, err := exec.Command(bin).Output()
		if err != nil {
			return -1
		}
		return strings.Count(string(out), "\n-A ")
	}
	if count("iptables-legacy-save") > max(count("iptables-nft-save"), 0) {
		return Legacy
	}
	return NFT
}

// LookupRunner returns the runner for a family (4 or 6) and backend, with
// both tools it needs found in PATH: the backend's own
// (iptables-nft-save and iptables-nft-restore), else the plain names. An
// error names what is missing and the package to install.
func LookupRunner(family int, b Backend) (*ExecRunner, error) {
	prefix := desired.FilterTool(family)
	var missing []string
	for _, infix := range []string{"-" + string(b), ""} {
		r := &ExecRunner{save: prefix + infix + "-save", restore: prefix + infix + "-restore", family: family}
		_, errSave := exec.LookPath(r.save)
		_, errRestore := exec.LookPath(r.restore)
		if errSave == nil && errRestore == nil {
			return r, nil
		}
		for _, m := range []struct {
			name string
			err  error
		}{{r.save, errSave}, {r.restore, errRestore}} {
			if m.err != nil {
				missing = append(missing, m.name)
			}
		}
	}
	return nil, fmt.Errorf("%s not found in PATH (missing %s): install the iptables package", prefix+"-save and "+prefix+"-restore", strings.Join(missing, ", "))
}

// NewExecRunner returns the runner for a family (4 or 6) and backend, as
// LookupRunner finds it, or with the plain iptables-save/restore names
// when it finds none.
func NewExecRunner(family int, b Backend) *ExecRunner {
	if r, err := LookupRunner(family, b); err == nil {
		return r
	}
	prefix := desired.FilterTool(family)
	return &ExecRunner{save: prefix + "-save", restore: prefix + "-restore", family: family}
}

// String names the tools, for logs.
func (r *ExecRunner) String() string { return r.restore }

// Tool names the family's tool, iptables or ip6tables.
func (r *ExecRunner) Tool() string { return desired.FilterTool(r.family) }

// run runs a tool; an error carries its stderr, which a caller bounds.
// With record, the child's process id goes to r.children before its
// input does (`ip netns exec` execs the tool in the same process).
func (r *ExecRunner) run(stdin string, record bool, name string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(append(append([]string{}, r.prefix...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if !record || r.children == nil {
		cmd.Stdin = strings.NewReader(stdin)
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return "", "", err
	}
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	r.children.add(cmd.Process.Pid)
	// A tool that dies early closes the pipe: its exit status says why.
	_, _ = io.Copy(in, strings.NewReader(stdin))
	_ = in.Close()
	err = cmd.Wait()
	return out.String(), errOut.String(), err
}

// Save returns iptables-save output for one table.
func (r *ExecRunner) Save(table string) (string, error) {
	out, stderr, err := r.run("", false, r.save, "-t", table)
	if err != nil {
		return "", fmt.Errorf("%s -t %s: %w: %s", r.save, table, err, message(stderr))
	}
	return out, nil
}

// Restore applies input atomically, leaving chains it does not declare
// alone; -w waits for the xtables lock other tools hold. An error is a
// *RestoreError: the tool's message and the input line it names.
func (r *ExecRunner) Restore(input string) error {
	_, stderr, err := r.run(input, true, r.restore, "--noflush", "-w", "5")
	if err != nil {
		return newRestoreError(r.restore, input, stderr, err)
	}
	return nil
}
