package healthcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/internal/sandbox"
)

const (
	// execStderrMax bounds what is kept of a command's stderr, whose
	// first line goes into the error (cut by outsideText); stdout is not
	// read at all.
	execStderrMax = sandbox.StderrMax
	// execDefaultUser is the configuration's default user.
	execDefaultUser = "nobody"
)

// execChecker runs a program, without a shell, with the target in its
// environment (LBD_REAL_SERVER_ADDRESS, LBD_REAL_SERVER_PORT, LBD_SERVICE
// and a minimal PATH); exit status 0 is healthy.
//
// When lbd runs as root the program runs as hc.User (default "nobody"),
// with that user's groups. When lbd does not run as root it cannot switch
// users, so the program runs as lbd's own user whatever hc.User says.
//
// The program runs in sandbox.Run's sandbox: its own process group, from
// "/", stdin and stdout on /dev/null. When ctx ends the whole group is
// killed, and so is whatever the program left running in the group after
// it exited.
type execChecker struct {
	path    string
	args    []string            // after the program's name
	cred    *syscall.Credential // nil: run as lbd's user
	timeout time.Duration
}

func newExecChecker(hc config.HealthCheck) (*execChecker, error) {
	if len(hc.Command) == 0 || !filepath.IsAbs(hc.Command[0]) {
		return nil, errors.New("command must start with the program's absolute path")
	}
	c := &execChecker{
		path:    hc.Command[0],
		args:    hc.Command[1:],
		timeout: checkerTimeout(hc),
	}
	name := hc.User
	if name == "" {
		name = execDefaultUser
	}
	// The user is looked up once, here, so that a missing user is an
	// error of the configuration rather than of every check.
	var err error
	if c.cred, err = sandbox.Credential(name); err != nil {
		return nil, fmt.Errorf("user: %w", err)
	}
	return c, nil
}

func (c *execChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, _ := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	// stderr is kept here rather than by sandbox.Run: its first line is
	// cut and escaped as everything a real server may have said is.
	var stderr execStderr
	err = sandbox.Run(ctx, sandbox.Command{
		Path: c.path,
		Args: c.args,
		Env: []string{
			"LBD_REAL_SERVER_ADDRESS=" + raddr.Addr().String(),
			"LBD_REAL_SERVER_PORT=" + strconv.Itoa(int(raddr.Port())),
			"LBD_SERVICE=" + t.Service,
		},
		Cred:   c.cred,
		Stderr: &stderr,
	})
	if err == nil {
		return nil
	}
	// Only a program killed because ctx ended wraps ctx's error; a start
	// failure ("start: ...") is reported as it is.
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = checkerErr(ctx, start, "command", ctx.Err())
	}
	if line := stderr.firstLine(); line != "" {
		return fmt.Errorf("%w: %s", err, line)
	}
	return err
}

// execStderr keeps the start of a command's stderr and discards the rest,
// so that a chatty command cannot make lbd buffer without bound.
type execStderr struct {
	buf []byte
	cut bool // some was discarded
}

func (w *execStderr) Write(p []byte) (int, error) {
	room := execStderrMax - len(w.buf)
	if room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	w.cut = w.cut || len(p) > room
	return len(p), nil
}

// firstLine is the first non-empty line of stderr, cut and escaped by
// outsideText for results and logs: the command may repeat what a real
// server said.
func (w *execStderr) firstLine() string {
	rest := w.buf
	for len(rest) > 0 {
		line, after, found := bytes.Cut(rest, []byte("\n"))
		rest = after
		if line = bytes.TrimSpace(line); len(line) > 0 {
			// A line that runs to the end of what was kept is longer.
			return outsideCut(string(line), !found && w.cut)
		}
	}
	return ""
}
