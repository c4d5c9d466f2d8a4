package sandbox

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
	"strings"
	"syscall"
	"testing"
	"time"
)

// testDirs returns a directory for scripts and one they may write to,
// both usable by the user programs run as ("nobody" under root).
func testDirs(t *testing.T) (scripts, out string) {
	t.Helper()
	scripts = t.TempDir()
	out = filepath.Join(scripts, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	// t.TempDir makes its directories 0700; Mkdir applies the umask.
	for d, mode := range map[string]os.FileMode{filepath.Dir(scripts): 0o755, scripts: 0o755, out: 0o777} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	return scripts, out
}

// testScript writes a shell script and returns its path.
func testScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	// A child forked while the file is open for writing would inherit the
	// descriptor until its exec, and exec would fail with "text file
	// busy" (golang/go#22315).
	syscall.ForkLock.RLock()
	err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testAwaitGone waits for the process whose PID is in file to die (be
// gone or a zombie).
func testAwaitGone(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the script did not record its child: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		i := bytes.LastIndexByte(stat, ')')
		if err != nil || (i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z') {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("process %d the program started is still running", pid)
		}
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	dir, out := testDirs(t)
	cred, err := Credential("nobody")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, script string
		args, env    []string
		timeout      time.Duration
		cancelAfter  time.Duration // cancel ctx after this
		want         string        // the whole error; "" for nil
		wantIs       error
		childFile    string // the process whose PID is there must be gone
	}{
		{name: "exit 0", script: "exit 0"},
		{name: "exit 1 with stderr", script: "echo >&2\necho '  db down ' >&2\necho more >&2\nexit 1", want: "exit status 1: db down"},
		{name: "exit 3 without stderr", script: "echo 'on stdout'\nexit 3", want: "exit status 3"},
		{name: "escaped stderr", script: `printf 'a\033[31mred\tb\377\n' >&2; exit 1`, want: `exit status 1: a\x1b[31mred\tb\xff`},
		{name: "long stderr", script: "head -c 100000 /dev/zero | tr '\\0' x >&2\nexit 1", want: "exit status 1: " + strings.Repeat("x", lineMax) + "…"},
		{name: "killed by a signal", script: "kill -9 $$", want: "signal: killed"},
		// Arguments reach the program as they are: no shell is involved.
		{name: "arguments", script: `[ $# -eq 3 ] && [ "$1" = '$(touch /tmp/lbd-sandbox-pwned)' ] && [ "$2" = 'a b;c' ] && [ "$3" = '*' ] || { echo "args: $*" >&2; exit 1; }`,
			args: []string{"$(touch /tmp/lbd-sandbox-pwned)", "a b;c", "*"}},
		{name: "environment", script: `[ "$A" = 1 ] && [ "$PATH" = /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ] && [ -z "$HOME" ] && [ $(env | wc -l) -le 4 ] && [ "$(pwd)" = / ] || { echo "$(env | tr '\n' ' ')" >&2; exit 1; }`,
			env: []string{"A=1"}},
		{name: "stdin is empty", script: "read line && exit 1 || exit 0"},
		{name: "timeout", script: "echo 'about to hang' >&2\nsleep 60 &\necho $! > " + out + "/hang\nwait",
			timeout: 200 * time.Millisecond, want: "timeout after 200ms: about to hang", wantIs: context.DeadlineExceeded, childFile: "hang"},
		{name: "canceled", script: "sleep 60", cancelAfter: 100 * time.Millisecond, want: "killed: context canceled", wantIs: context.Canceled},
		{name: "leaves a child behind", script: "sleep 60 &\necho $! > " + out + "/orphan\nexit 0", childFile: "orphan"},
		{name: "not executable", script: "", want: "start: fork/exec " + filepath.Join(dir, "not-executable") + ": permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := testScript(t, dir, strings.ReplaceAll(tt.name, " ", "-"), tt.script)
			if tt.name == "not executable" {
				os.Chmod(path, 0o644)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancelAfter > 0 {
				time.AfterFunc(tt.cancelAfter, cancel)
			}
			start := time.Now()
			err := Run(ctx, Command{Path: path, Args: tt.args, Env: tt.env, Cred: cred, Timeout: tt.timeout})
			if got := fmt.Sprint(err); (err == nil) != (tt.want == "") || (err != nil && got != tt.want) {
				t.Errorf("Run: %v; want %q", err, tt.want)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Run: %v; want it to wrap %v", err, tt.wantIs)
			}
			if tt.childFile != "" {
				testAwaitGone(t, filepath.Join(out, tt.childFile))
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("Run took %s", d)
			}
		})
	}
	t.Cleanup(func() {
		if _, err := os.Stat("/tmp/lbd-sandbox-pwned"); err == nil {
			t.Error("an argument was interpreted by a shell")
		}
	})
}

// TestRunStderrWriter: a caller's Stderr gets stderr, and the error does
// not quote it.
func TestRunStderrWriter(t *testing.T) {
	t.Parallel()
	dir, _ := testDirs(t)
	path := testScript(t, dir, "fail", "echo 'to the caller' >&2\nexit 2")
	var w bytes.Buffer
	err := Run(context.Background(), Command{Path: path, Stderr: &w})
	var exit *exec.ExitError
	if !errors.As(err, &exit) || err.Error() != "exit status 2" {
		t.Errorf("Run: %v; want exactly exit status 2", err)
	}
	if w.String() != "to the caller\n" {
		t.Errorf("stderr %q", w.String())
	}
}

func TestRunRelativePath(t *testing.T) {
	t.Parallel()
	err := Run(context.Background(), Command{Path: "true"})
	if err == nil || !strings.HasPrefix(err.Error(), "start: ") {
		t.Errorf("Run of a relative path: %v; want a start error", err)
	}
}

// TestCredential: under root a program runs as the user, with its groups
// only; otherwise Credential is nil and the user must still exist.
func TestCredential(t *testing.T) {
	t.Parallel()
	if _, err := Credential("lbd-no-such-user"); err == nil || !strings.Contains(err.Error(), "lbd-no-such-user") {
		t.Errorf("Credential of a missing user: %v", err)
	}
	cred, err := Credential("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		if cred != nil {
			t.Errorf("Credential as %d = %+v; want nil", os.Geteuid(), cred)
		}
		return
	}
	u, _ := user.Lookup("nobody")
	if want := u.Uid; strconv.Itoa(int(cred.Uid)) != want || cred.Groups == nil {
		t.Errorf("Credential(nobody) = %+v; want uid %s and explicit groups", cred, want)
	}
	dir, _ := testDirs(t)
	path := testScript(t, dir, "whoami", `[ "$(id -un)" = nobody ] && [ "$(id -G)" = "$(id -g nobody)" ] || { echo "running as $(id)" >&2; exit 1; }`)
	if err := Run(context.Background(), Command{Path: path, Cred: cred}); err != nil {
		t.Error(err)
	}
}

func TestCredentialOf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		u    user.User
		want string
	}{
		{user.User{Uid: "x", Gid: "1"}, `uid "x"`},
		{user.User{Uid: "1", Gid: "-1"}, `gid "-1"`},
	} {
		if _, err := credentialOf(&tt.u); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("credentialOf(%+v): %v; want %q", tt.u, err, tt.want)
		}
	}
}

func TestStderrBuf(t *testing.T) {
	t.Parallel()
	var w stderrBuf
	for range 100 {
		if n, err := w.Write(make([]byte, 1000)); n != 1000 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if len(w.buf) != StderrMax || !w.cut {
		t.Errorf("kept %d bytes (cut %v); want %d", len(w.buf), w.cut, StderrMax)
	}
	// A line that runs past what is kept is marked as longer.
	var cut stderrBuf
	fmt.Fprint(&cut, strings.Repeat("\n", StderrMax-3)+"abcdef")
	if got := cut.firstLine(); got != "abc…" {
		t.Errorf("firstLine of a cut stderr = %q", got)
	}
	// Not cut inside a character.
	var wide stderrBuf
	fmt.Fprint(&wide, "x"+strings.Repeat("é", lineMax))
	if got, want := wide.firstLine(), "x"+strings.Repeat("é", lineMax/2-1)+"…"; got != want {
		t.Errorf("firstLine = %q; want %q", got, want)
	}
}
