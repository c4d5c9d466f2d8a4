package iptables

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// ExecRunner runs the iptables tools of one family and backend.
type ExecRunner struct {
	save, restore string // binaries, e.g. iptables-nft-save
	prefix        []string
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

// NewExecRunner returns the runner for a family (4 or 6) and backend,
// falling back to the plain iptables-save/restore names where the
// backend-specific ones are not installed.
func NewExecRunner(family int, b Backend) *ExecRunner {
	prefix := desired.FilterTool(family)
	r := &ExecRunner{save: prefix + "-" + string(b) + "-save", restore: prefix + "-" + string(b) + "-restore"}
	if _, err := exec.LookPath(r.save); err != nil {
		r.save, r.restore = prefix+"-save", prefix+"-restore"
	}
	return r
}

// String names the tools, for logs.
func (r *ExecRunner) String() string { return r.restore }

func (r *ExecRunner) run(stdin string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(append(append([]string{}, r.prefix...), name), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// Save returns iptables-save output for one table.
func (r *ExecRunner) Save(table string) (string, error) {
	return r.run("", r.save, "-t", table)
}

// Restore applies input atomically, leaving chains it does not declare
// alone; -w waits for the xtables lock other tools hold.
func (r *ExecRunner) Restore(input string) error {
	_, err := r.run(input, r.restore, "--noflush", "-w", "5")
	return err
}
