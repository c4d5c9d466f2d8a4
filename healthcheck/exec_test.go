package healthcheck

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// execTestDirs returns a directory for scripts and one the scripts may
// write to, both usable by the user checks run as ("nobody" under root).
func execTestDirs(t testing.TB) (scripts, out string) {
	t.Helper()
	scripts = t.TempDir()
	out = filepath.Join(scripts, "out")
	if err := os.Mkdir(out, 0o777); err != nil {
		t.Fatal(err)
	}
	// t.TempDir makes its directories 0700.
	for _, d := range []string{filepath.Dir(scripts), scripts} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(out, 0o777); err != nil {
		t.Fatal(err)
	}
	return scripts, out
}

// execTestScript writes a shell script and returns its path.
func execTestScript(t testing.TB, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	// A child forked while the file is open for writing would inherit the
	// descriptor until its exec, and exec of the script would then fail
	// with "text file busy": hold off forks while writing (golang/go#22315).
	syscall.ForkLock.RLock()
	err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// execTestGone reports whether process pid has died: it no longer exists,
// or is a zombie that nobody reaped yet.
func execTestGone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// execTestAwaitGone waits for the process whose PID is in file to die.
func execTestAwaitGone(t *testing.T, file string) {
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
	for start := time.Now(); !execTestGone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("process %d the check started is still running", pid)
		}
	}
}

func TestExecCheck(t *testing.T) {
	t.Parallel()
	dir, out := execTestDirs(t)
	target := Target{Addr: netip.MustParseAddrPort("192.0.2.10:8080"), Service: "web"}
	tests := []struct {
		name    string
		script  string
		args    []string
		timeout time.Duration
		want    string
		// wantExact: the error must be exactly want.
		wantExact bool
		// childFile: after the check, the process whose PID the script
		// wrote there must be gone.
		childFile string
		// fast: the check must return well before its timeout.
		fast bool
	}{
		{name: "exit 0", script: "exit 0", want: ""},
		{name: "exit 1 with stderr", script: "echo 'db down' >&2\necho 'details' >&2\nexit 1", want: "exit status 1: db down", wantExact: true},
		{name: "stderr starts with a blank line", script: "echo >&2\necho '  db down  ' >&2\nexit 2", want: "exit status 2: db down", wantExact: true},
		{name: "exit 3 without stderr", script: "echo 'on stdout'\nexit 3", want: "exit status 3", wantExact: true},
		{name: "long stderr", script: "head -c 100000 /dev/zero | tr '\\0' x >&2\nexit 1", want: "exit status 1: " + strings.Repeat("x", outsideMax) + "…(4096+ bytes)", wantExact: true},
		{name: "killed by a signal", script: "kill -9 $$", want: "signal: killed", wantExact: true},
		{name: "environment", script: `[ "$LBD_REAL_SERVER_ADDRESS" = 192.0.2.10 ] && [ "$LBD_REAL_SERVER_PORT" = 8080 ] && [ "$LBD_SERVICE" = web ] &&
[ "$PATH" = /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin ] && [ "$(pwd)" = / ] || { env >&2; exit 1; }`, want: ""},
		// Arguments reach the program as they are: no shell is involved.
		{name: "arguments", script: `[ $# -eq 3 ] && [ "$1" = '$(touch /tmp/lbd-pwned)' ] && [ "$2" = 'a b;c' ] && [ "$3" = '*' ] || { echo "args: $*" >&2; exit 1; }`,
			args: []string{"$(touch /tmp/lbd-pwned)", "a b;c", "*"}, want: ""},
		{name: "stdin is empty", script: "read line && exit 1 || exit 0", want: ""},
		{name: "sleeps past the timeout", script: "echo 'about to hang' >&2\nsleep 60 &\necho $! > " + out + "/hang\nwait",
			timeout: 300 * time.Millisecond, want: "command: timeout after 300ms: about to hang", wantExact: true, childFile: "hang"},
		{name: "leaves a child behind", script: "sleep 60 &\necho $! > " + out + "/orphan\nexit 0",
			timeout: 5 * time.Second, want: "", childFile: "orphan", fast: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			hc := checkerTestHC(config.CheckExec)
			script := execTestScript(t, dir, strings.ReplaceAll(tt.name, " ", "-"), tt.script)
			hc.Command = append([]string{script}, tt.args...)
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 5 * time.Second
			}
			err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), target, timeout)
			checkerTestWant(t, err, tt.want)
			if tt.wantExact && err != nil && err.Error() != tt.want {
				t.Errorf("error %q; want exactly %q", err, tt.want)
			}
			if tt.childFile != "" {
				execTestAwaitGone(t, filepath.Join(out, tt.childFile))
			}
			if tt.fast && elapsed > timeout/2 {
				t.Errorf("check took %s of its %s timeout", elapsed, timeout)
			}
			t.Logf("%v after %s", err, elapsed)
		})
	}
	if _, err := os.Stat("/tmp/lbd-pwned"); err == nil {
		t.Error("an argument was interpreted by a shell")
	}
}

// TestExecCheckStartErrors: a program that cannot start fails the check.
func TestExecCheckStartErrors(t *testing.T) {
	t.Parallel()
	dir, _ := execTestDirs(t)
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\nexit 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{notExec, "permission denied"},
		{filepath.Join(dir, "missing"), "no such file or directory"},
	} {
		hc := checkerTestHC(config.CheckExec)
		hc.Command = []string{tt.path}
		err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: netip.MustParseAddrPort("192.0.2.10:80")}, time.Second)
		checkerTestWant(t, err, "start: ")
		checkerTestWant(t, err, tt.want)
	}
}

// TestExecCheckUser: under root the command runs as the configured user,
// with that user's groups only.
func TestExecCheckUser(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	dir, _ := execTestDirs(t)
	script := execTestScript(t, dir, "whoami", `[ "$(id -un)" = nobody ] && [ "$(id -u)" = 65534 ] && [ "$(id -G)" = "$(id -g nobody)" ] || { echo "running as $(id)" >&2; exit 1; }`)
	hc := checkerTestHC(config.CheckExec)
	hc.Command, hc.User = []string{script}, "nobody"
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: netip.MustParseAddrPort("192.0.2.10:80")}, 5*time.Second)
	checkerTestWant(t, err, "")
}

// TestExecCheckEscapedChild: a descendant that left the process group
// and holds stderr open delays the check by execWaitDelay only.
func TestExecCheckEscapedChild(t *testing.T) {
	t.Parallel()
	setsid, err := exec.LookPath("setsid")
	if err != nil {
		t.Skip("no setsid here")
	}
	dir, out := execTestDirs(t)
	pidFile := filepath.Join(out, "escaped")
	script := execTestScript(t, dir, "escape", setsid+" sh -c 'echo $$ > "+pidFile+"; exec sleep 60' &\nsleep 0.2\nexit 0")
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	hc := checkerTestHC(config.CheckExec)
	hc.Command = []string{script}
	err, elapsed := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: netip.MustParseAddrPort("192.0.2.10:80")}, 5*time.Second)
	checkerTestWant(t, err, "")
	if elapsed > 2*time.Second {
		t.Errorf("check took %s", elapsed)
	}
}

// TestExecCheckEnvironmentIsolated: lbd's environment does not reach the
// command. Not parallel: it sets the environment.
func TestExecCheckEnvironmentIsolated(t *testing.T) {
	t.Setenv("LBD_TEST_SECRET", "leaked")
	dir, _ := execTestDirs(t)
	script := execTestScript(t, dir, "env", `[ -z "$LBD_TEST_SECRET" ] && [ -z "$HOME" ] && [ $(env | wc -l) -le 5 ] || { echo "environment: $(env | tr '\n' ' ')" >&2; exit 1; }`)
	hc := checkerTestHC(config.CheckExec)
	hc.Command = []string{script}
	err, _ := checkerTestRun(t, checkerTestNew(t, hc), Target{Addr: netip.MustParseAddrPort("192.0.2.10:80")}, 5*time.Second)
	checkerTestWant(t, err, "")
}

func TestExecStderrFirstLine(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", outsideMax) // two bytes each
	tests := []struct{ in, want string }{
		{"", ""},
		{"\n\n  \n", ""},
		{"one\ntwo", "one"},
		{"\r\n  trimmed \t\r\nnext", "trimmed"},
		{long, long[:outsideMax] + "…(400 bytes)"},
		{"x" + long, "x" + long[:outsideMax-2] + "…(401 bytes)"}, // not cut inside "é"
		{"bad \xff byte", `bad \xff byte`},
		{"\x1b[31mred\x1b[0m\rover", `\x1b[31mred\x1b[0m\rover`}, // no terminal escapes in logs
	}
	for _, tt := range tests {
		var w execStderr
		fmt.Fprint(&w, tt.in)
		if got := w.firstLine(); got != tt.want {
			t.Errorf("firstLine(%q) = %q; want %q", tt.in, got, tt.want)
		}
	}
	// A line that runs past what is kept is marked as longer.
	var cut execStderr
	fmt.Fprint(&cut, strings.Repeat("\n", execStderrMax-6)+"abcdefghij")
	if got, want := cut.firstLine(), "abcdef…(6+ bytes)"; got != want {
		t.Errorf("firstLine of a cut stderr = %q; want %q", got, want)
	}
	var w execStderr
	for range 100 {
		n, err := w.Write(make([]byte, 1000))
		if n != 1000 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if len(w.buf) != execStderrMax {
		t.Errorf("kept %d bytes of stderr; want %d", len(w.buf), execStderrMax)
	}
}
