package conntrackd

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbdproject/lbd/internal/syncbuf"
)

func TestRender(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Settings
		want []string
	}{
		{"IPv4", Settings{Interface: "eth1", Local: netip.MustParseAddr("198.19.10.2"), Peer: netip.MustParseAddr("198.19.10.3"), Port: 3780, Dir: "/run/lbd/conntrackd"},
			[]string{"\t\tIPv4_address 198.19.10.2\n\t\tIPv4_Destination_Address 198.19.10.3\n\t\tPort 3780\n\t\tInterface eth1\n",
				"LockFile /run/lbd/conntrackd/lock", "Path /run/lbd/conntrackd/ctl", "Mode FTFW", "DisableExternalCache off",
				"\t\t\tIPv4_address 198.19.10.2\n\t\t\tIPv4_address 198.19.10.3\n"}},
		{"IPv6", Settings{Interface: "eth1", Local: netip.MustParseAddr("2001:2:0:10::2"), Peer: netip.MustParseAddr("2001:2:0:10::3"), Port: 4000, Dir: "/x"},
			[]string{"IPv6_address 2001:2:0:10::2\n\t\tIPv6_Destination_Address 2001:2:0:10::3\n\t\tPort 4000", "\t\t\tIPv6_address 2001:2:0:10::3\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Render(tt.s)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("no %q in:\n%s", w, got)
				}
			}
			if strings.Count(got, "{") != strings.Count(got, "}") {
				t.Errorf("unbalanced braces:\n%s", got)
			}
		})
	}
}

// fakeProgram is a conntrackd stand-in: run with -C FILE alone it prints
// a line of each level and waits (or exits at once when the file
// "exit" exists in its directory); with a command flag it records the
// flag, and fails for -B when "fail" exists.
func fakeProgram(t *testing.T) (prog, dir string) {
	t.Helper()
	dir = t.TempDir()
	prog = filepath.Join(dir, "conntrackd")
	script := `#!/bin/sh
d=$(dirname "$0")
if [ $# -eq 2 ]; then
	echo "[notice] -- starting in console mode --"
	echo "[warning] something odd"
	[ -e "$d/exit" ] && exit 3
	: > "$d/run/ctl"
	exec sleep 60
fi
printf "%s\n" "$3" >> "$d/commands"
if [ "$3" = -B ] && [ -e "$d/fail" ]; then echo "cannot connect"; exit 1; fi
`
	if err := os.WriteFile(prog, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return prog, dir
}

// syncBuffer is a log sink the goroutines under test may write.
type syncBuffer = syncbuf.Buffer

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen in 10s", what)
		}
	}
}

func TestDaemon(t *testing.T) {
	prog, dir := fakeProgram(t)
	var logs syncBuffer
	var started atomic.Int32
	d := New(Options{Program: prog, Settings: Settings{Interface: "eth1", Local: netip.MustParseAddr("198.19.10.2"),
		Peer: netip.MustParseAddr("198.19.10.3"), Port: 3780, Dir: filepath.Join(dir, "run")},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), MinRestart: 10 * time.Millisecond,
		OnStarted: func() { started.Add(1) }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	eventually(t, "running", func() bool { return d.Status().Running })
	eventually(t, "OnStarted called", func() bool { return started.Load() == 1 })
	eventually(t, "its output logged", func() bool {
		return strings.Contains(logs.String(), `level=WARN msg="conntrackd: [warning] something odd"`)
	})
	if b, err := os.ReadFile(filepath.Join(dir, "run", "conntrackd.conf")); err != nil || !strings.Contains(string(b), "Interface eth1") {
		t.Errorf("configuration: %v\n%s", err, b)
	}

	ctx2 := context.Background()
	if err := d.Commit(ctx2); err != nil {
		t.Fatal(err)
	}
	if err := d.Lead(ctx2); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644)
	err := d.Lead(ctx2)
	if err == nil || !strings.Contains(err.Error(), "-B: exit status 1: cannot connect") {
		t.Errorf("failing Lead: %v", err)
	}
	if st := d.Status(); st.LastCommand != "lead" || st.LastCommandError == "" {
		t.Errorf("status after a failed command: %+v", st)
	}
	if err := d.Follow(ctx2); err != nil || d.Status().LastCommandError != "" {
		t.Errorf("Follow: %v, %+v", err, d.Status())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "commands")); string(b) != "-c\n-f\n-R\n-B\n-f\n-R\n-B\n-n\n" {
		t.Errorf("commands run: %q", b)
	}

	// An exit is followed by a restart.
	os.WriteFile(filepath.Join(dir, "exit"), nil, 0o644)
	pid := d.Status().PID
	if p, err := os.FindProcess(pid); err == nil {
		p.Kill()
	}
	eventually(t, "restarted", func() bool { return d.Status().Restarts >= 2 })
	os.Remove(filepath.Join(dir, "exit"))
	eventually(t, "running again", func() bool { st := d.Status(); return st.Running && st.PID != pid })
	eventually(t, "OnStarted called after the restart", func() bool { return started.Load() >= 2 })
	if !strings.Contains(logs.String(), "conntrackd exited") {
		t.Errorf("no exit logged:\n%s", logs.String())
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if d.Status().Running {
		t.Error("still running after Run returned")
	}
}
