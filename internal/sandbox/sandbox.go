// Package sandbox runs the programs lbd's configuration names (exec health
// checks, VRRP notify programs) with as little of lbd as possible: no
// shell, another user, a minimal environment, their own process group,
// and nothing left running once they are done.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

const (
	// Path is the whole PATH a program gets: the environment is minimal
	// so that lbd's own does not leak into it.
	Path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// StderrMax bounds what Run keeps of a program's stderr; stdout is
	// not read at all.
	StderrMax = 4096
	// waitDelay bounds the wait for stderr to close once the program has
	// exited and its process group has been killed: only a descendant
	// that left the group (setsid) can keep it open that long.
	waitDelay = 100 * time.Millisecond
	// lineMax bounds the stderr line Run puts in its error.
	lineMax = 200
)

// Command is a program to run.
type Command struct {
	// Path is the program's absolute path; it is executed directly, never
	// through a shell.
	Path string
	// Args are the arguments after the program's name (argv[0] is Path).
	Args []string
	// Env is the environment beyond PATH ("NAME=value").
	Env []string
	// Cred is who the program runs as (Credential); nil: lbd's own user.
	Cred *syscall.Credential
	// Timeout, when positive, bounds the run: past it the program's
	// process group is killed and Run's error says so.
	Timeout time.Duration
	// Stderr, when set, receives the program's stderr, and Run's error
	// does not quote it: for a caller that formats stderr itself. When
	// nil, Run keeps the first StderrMax bytes and quotes the first line.
	Stderr io.Writer
}

// Credential looks user up and returns who a program runs as: the user,
// its primary group, and its supplementary groups only. It is nil when lbd
// is not root, as lbd then cannot switch users (programs run as lbd's own
// user); the user must still exist, so that a typo is an error wherever
// lbd runs.
func Credential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err // "user: unknown user NAME"
	}
	if os.Geteuid() != 0 {
		return nil, nil
	}
	cred, err := credentialOf(u)
	if err != nil {
		return nil, fmt.Errorf("user %s: %w", name, err)
	}
	return cred, nil
}

// credentialOf is u as a credential. The supplementary groups are set even
// when there are none, so that root's are not inherited.
func credentialOf(u *user.User) (*syscall.Credential, error) {
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

// timeoutError is a run cut short by Command.Timeout.
type timeoutError struct{ d time.Duration }

func (e timeoutError) Error() string { return "timeout after " + e.d.String() }
func (e timeoutError) Unwrap() error { return context.DeadlineExceeded }

// Run runs c and waits for it: nil when it exits 0. The program runs from
// "/", with stdin and stdout on /dev/null, in a process group of its own;
// when ctx ends or c.Timeout passes the whole group is killed, and so is
// whatever the program left running in the group after it exited.
//
// The error is "start: ..." when the program could not start; it wraps
// context.DeadlineExceeded ("timeout after 30s") or ctx's error ("killed:
// context canceled") when it was killed for that; else it is the exit
// status (an *exec.ExitError). Unless c.Stderr is set, the first line of
// stderr follows, cut and with control characters escaped.
func Run(ctx context.Context, c Command) error {
	if !filepath.IsAbs(c.Path) {
		return fmt.Errorf("start: %q is not an absolute path", c.Path)
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.Timeout, timeoutError{c.Timeout})
		defer cancel()
	}
	stderr, kept := c.Stderr, (*stderrBuf)(nil)
	if stderr == nil {
		kept = &stderrBuf{}
		stderr = kept
	}
	cmd := &exec.Cmd{
		Path:        c.Path,
		Args:        append([]string{c.Path}, c.Args...),
		Dir:         "/",
		Env:         append([]string{Path}, c.Env...),
		Stderr:      stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: c.Cred},
		WaitDelay:   waitDelay,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	err := wait(ctx, cmd)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.As(cause, new(timeoutError)) {
			err = cause
		} else {
			err = fmt.Errorf("killed: %w", ctx.Err())
		}
	}
	if line := kept.firstLine(); line != "" {
		return fmt.Errorf("%w: %s", err, line)
	}
	return err
}

// wait waits for cmd, started with Setpgid, killing its group when ctx
// ends and once it has exited.
func wait(ctx context.Context, cmd *exec.Cmd) error {
	// Setpgid made the program the leader of a new group with its PID as
	// the group's ID.
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		awaitExit(pgid)
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
	err := cmd.Wait()
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0 but a descendant outside the group holds stderr.
		return nil
	}
	return err
}

// awaitExit blocks until process pid has exited, without reaping it
// (WNOWAIT): while it is a zombie its PID, and so its process group ID,
// stays taken, and the group can be killed safely. cmd.Wait reaps it.
func awaitExit(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// stderrBuf keeps the start of a program's stderr and discards the rest,
// so that a chatty program cannot make lbd buffer without bound.
type stderrBuf struct {
	buf []byte
	cut bool // some was discarded
}

func (w *stderrBuf) Write(p []byte) (int, error) {
	room := StderrMax - len(w.buf)
	if room > 0 {
		w.buf = append(w.buf, p[:min(room, len(p))]...)
	}
	w.cut = w.cut || len(p) > room
	return len(p), nil
}

// firstLine is the first non-empty line of stderr, for errors and logs:
// cut to lineMax bytes ("…" marks a longer line), with invalid UTF-8 and
// non-printable characters escaped so that no terminal escape reaches a
// log. "" for a nil w.
func (w *stderrBuf) firstLine() string {
	if w == nil {
		return ""
	}
	rest := w.buf
	for len(rest) > 0 {
		line, after, found := bytes.Cut(rest, []byte("\n"))
		rest = after
		if line = bytes.TrimSpace(line); len(line) > 0 {
			// A line that runs to the end of what was kept is longer.
			return escapeLine(line, !found && w.cut)
		}
	}
	return ""
}

func escapeLine(line []byte, longer bool) string {
	out := make([]byte, 0, min(len(line), lineMax)+len("…"))
	for i := 0; i < len(line); {
		r, size := utf8.DecodeRune(line[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, line[i])
		case unicode.IsPrint(r):
			piece = string(line[i : i+size])
		default:
			q := strconv.QuoteRune(r) // '\t', '\x1b', '\u200b'
			piece = q[1 : len(q)-1]
		}
		if len(out)+len(piece) > lineMax {
			longer = true
			break
		}
		out = append(out, piece...)
		i += size
	}
	if longer {
		out = append(out, "…"...)
	}
	return string(out)
}
