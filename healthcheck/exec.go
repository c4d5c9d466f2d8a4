package healthcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/config"
)

const (
	// execPath is the whole PATH a command gets: the environment is
	// minimal so that lbd's own does not leak into checks.
	execPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// execStderrMax bounds what is kept of a command's stderr, whose
	// first line goes into the error (cut by outsideText); stdout is not
	// read at all.
	execStderrMax = 4096
	// execWaitDelay bounds the wait for stderr to close once the command
	// has exited and its process group has been killed: only a descendant
	// that left the group (setsid) can keep it open that long.
	execWaitDelay = 100 * time.Millisecond
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
// The program runs in its own process group, from "/", with stdin and
// stdout on /dev/null. When ctx ends the whole group is killed, and so is
// whatever the program left running in the group after it exited.
type execChecker struct {
	path    string
	args    []string
	cred    *syscall.Credential // nil: run as lbd's user
	timeout time.Duration
}

func newExecChecker(hc config.HealthCheck) (*execChecker, error) {
	if len(hc.Command) == 0 || !filepath.IsAbs(hc.Command[0]) {
		return nil, errors.New("command must start with the program's absolute path")
	}
	c := &execChecker{
		path:    hc.Command[0],
		args:    hc.Command,
		timeout: checkerTimeout(hc),
	}
	name := hc.User
	if name == "" {
		name = execDefaultUser
	}
	// The user is looked up once, here, so that a missing user is an
	// error of the configuration rather than of every check.
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("user: %w", err)
	}
	if os.Geteuid() == 0 {
		c.cred, err = execCredential(u)
		if err != nil {
			return nil, fmt.Errorf("user %s: %w", name, err)
		}
	}
	return c, nil
}

// execCredential is who the command runs as. The supplementary groups are
// set even when there are none, so that root's are not inherited.
func execCredential(u *user.User) (*syscall.Credential, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid %q: %w", u.Gid, err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	gids, err := u.GroupIds()
	if err != nil {
		return cred, nil // the primary group alone is the safe side
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil && n != gid {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

func (c *execChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, _ := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	var stderr execStderr
	cmd := &exec.Cmd{
		Path: c.path,
		Args: c.args,
		Dir:  "/",
		Env: []string{
			execPath,
			"LBD_REAL_SERVER_ADDRESS=" + raddr.Addr().String(),
			"LBD_REAL_SERVER_PORT=" + strconv.Itoa(int(raddr.Port())),
			"LBD_SERVICE=" + t.Service,
		},
		Stderr:      &stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: c.cred},
		WaitDelay:   execWaitDelay,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	// Setpgid made the program the leader of a new group with its PID as
	// the group's ID.
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		execAwaitExit(pgid)
		close(exited)
	}()
	select {
	case <-exited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-exited
	}
	// The leader has exited but is not reaped yet, so no other group can
	// have taken its ID: kill whatever it left running in its group.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	err = cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0 but a descendant outside the group holds stderr.
		err = nil
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		err = checkerErr(ctx, start, "command", ctx.Err())
	}
	if line := stderr.firstLine(); line != "" {
		return fmt.Errorf("%w: %s", err, line)
	}
	return err
}

// execAwaitExit blocks until process pid has exited, without reaping it
// (WNOWAIT): while it is a zombie its PID, and so its process group ID,
// stays taken, and the group can be killed safely. cmd.Wait reaps it.
func execAwaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
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
