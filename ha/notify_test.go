package ha

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/internal/syncbuf"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/internal/sandbox"
)

// notifyTestDirs returns a directory for scripts and the file they append
// their argv to, both usable by the user programs run as ("nobody" when
// the tests run as root).
func notifyTestDirs(t *testing.T) (dir, out string) {
	t.Helper()
	dir = t.TempDir()
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o777); err != nil {
		t.Fatal(err)
	}
	// t.TempDir makes its directories 0700; Mkdir applies the umask.
	for d, mode := range map[string]os.FileMode{filepath.Dir(dir): 0o755, dir: 0o755, outDir: 0o777} {
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir, filepath.Join(outDir, "argv")
}

// notifyTestScript writes a script that appends its name and arguments
// to out, as one line, after body.
func notifyTestScript(t *testing.T, dir, name, out, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	text := "#!/bin/sh\n" + body + "\necho \"$(basename \"$0\") $*\" >> '" + out + "'\n"
	// A child forked while the file is open for writing would inherit the
	// descriptor until its exec, which would fail with "text file busy"
	// (golang/go#22315).
	syscall.ForkLock.RLock()
	err := os.WriteFile(p, []byte(text), 0o755)
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// notifyTestPrograms writes owner's programs (owner-notify, owner-master,
// ...) for the states in kinds ("notify" is the any-state program).
func notifyTestPrograms(t *testing.T, dir, out, owner string, kinds ...string) config.Notify {
	var n config.Notify
	dst := map[string]*string{"notify": &n.Any, "master": &n.Master, "backup": &n.Backup, "fault": &n.Fault, "stop": &n.Stop}
	for _, k := range kinds {
		*dst[k] = notifyTestScript(t, dir, owner+"-"+k, out, "")
	}
	return n
}

// notifyTestLines returns the lines of out that owner's programs wrote.
func notifyTestLines(t *testing.T, out, owner string) []string {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, owner+"-") {
			lines = append(lines, l)
		}
	}
	return lines
}

// syncBuffer is a log sink the goroutines under test may write.
type syncBuffer = syncbuf.Buffer

func notifyTestLogger() (*slog.Logger, *syncBuffer) {
	var buf syncBuffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), &buf
}

func notifyTestNew(t *testing.T, cfg *config.Config, log *slog.Logger, opts NotifyOptions) *Notifier {
	t.Helper()
	n, err := NewNotifier(cfg, log, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}

func notifyTestClose(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// ev is a transition of instance in group.
func ev(instance, group string, from, to vrrp.State, c vrrp.Cause) vrrp.Event {
	return vrrp.Event{Instance: instance, Group: group, Transition: vrrp.Transition{From: from, To: to, Cause: c}, Priority: 150, At: time.Now()}
}

// A whole life: start, master, back, fault, cleared, stopped.
func notifyTestLife(instance, group string) []vrrp.Event {
	return []vrrp.Event{
		ev(instance, group, vrrp.Init, vrrp.Backup, vrrp.CauseStart),
		ev(instance, group, vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown),
		ev(instance, group, vrrp.Master, vrrp.Backup, vrrp.CauseHigherPeer),
		ev(instance, group, vrrp.Backup, vrrp.Fault, vrrp.CauseFault),
		ev(instance, group, vrrp.Fault, vrrp.Backup, vrrp.CauseFaultCleared),
		ev(instance, group, vrrp.Backup, vrrp.Init, vrrp.CauseStop),
	}
}

// TestNotifierInstance: each transition runs the state's program, then
// notify with TYPE NAME STATE PRIORITY, in the order of the transitions.
func TestNotifierInstance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		kinds  []string
		events []vrrp.Event
		want   []string
	}{
		{name: "every program", kinds: []string{"notify", "master", "backup", "fault", "stop"},
			events: notifyTestLife("vi", ""),
			want: []string{
				"vi-backup", "vi-notify INSTANCE vi BACKUP 150",
				"vi-master", "vi-notify INSTANCE vi MASTER 150",
				"vi-backup", "vi-notify INSTANCE vi BACKUP 150",
				"vi-fault", "vi-notify INSTANCE vi FAULT 150",
				"vi-backup", "vi-notify INSTANCE vi BACKUP 150",
				"vi-stop", "vi-notify INSTANCE vi STOP 150",
			}},
		{name: "notify only", kinds: []string{"notify"}, events: notifyTestLife("vi", ""),
			want: []string{"vi-notify INSTANCE vi BACKUP 150", "vi-notify INSTANCE vi MASTER 150", "vi-notify INSTANCE vi BACKUP 150",
				"vi-notify INSTANCE vi FAULT 150", "vi-notify INSTANCE vi BACKUP 150", "vi-notify INSTANCE vi STOP 150"}},
		// The state programs take no arguments.
		{name: "master and stop only", kinds: []string{"master", "stop"}, events: notifyTestLife("vi", ""),
			want: []string{"vi-master", "vi-stop"}},
		{name: "no programs", events: notifyTestLife("vi", "")},
		// Init is notified only as lbd stopping the instance (STOP).
		{name: "init without stop", kinds: []string{"notify"},
			events: []vrrp.Event{ev("vi", "", vrrp.Fault, vrrp.Init, vrrp.CauseFault)}},
		{name: "unknown instance", kinds: []string{"notify"},
			events: []vrrp.Event{ev("other", "", vrrp.Init, vrrp.Backup, vrrp.CauseStart)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, out := notifyTestDirs(t)
			cfg := &config.Config{VRRP: []config.VRRPInstance{{Name: "vi", Priority: 150,
				Notify: notifyTestPrograms(t, dir, out, "vi", tt.kinds...)}}}
			n := notifyTestNew(t, cfg, nil, NotifyOptions{})
			for _, e := range tt.events {
				n.Event(e)
			}
			notifyTestClose(t, n)
			if got := notifyTestLines(t, out, "vi"); !slices.Equal(got, tt.want) {
				t.Errorf("programs ran:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestNotifierGroup: a sync group is notified once each time all its
// members reach a new common state, with priority 0; its members are
// notified as instances.
func TestNotifierGroup(t *testing.T) {
	t.Parallel()
	both := func(from, to vrrp.State, c vrrp.Cause) []vrrp.Event {
		return []vrrp.Event{ev("a", "g", from, to, c), ev("b", "g", from, to, c)}
	}
	start := both(vrrp.Init, vrrp.Backup, vrrp.CauseStart)
	tests := []struct {
		name   string
		events [][]vrrp.Event
		want   []string
	}{
		{name: "start", events: [][]vrrp.Event{start}, want: []string{"g-backup", "g-notify GROUP g BACKUP 0"}},
		{name: "one member started", events: [][]vrrp.Event{start[:1]}},
		{name: "whole life", events: [][]vrrp.Event{start,
			both(vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown),
			both(vrrp.Master, vrrp.Backup, vrrp.CauseHigherPeer),
			both(vrrp.Backup, vrrp.Fault, vrrp.CauseFault),
			both(vrrp.Fault, vrrp.Backup, vrrp.CauseFaultCleared),
			both(vrrp.Backup, vrrp.Init, vrrp.CauseStop)},
			want: []string{"g-backup", "g-notify GROUP g BACKUP 0", "g-master", "g-notify GROUP g MASTER 0",
				"g-backup", "g-notify GROUP g BACKUP 0", "g-fault", "g-notify GROUP g FAULT 0",
				"g-backup", "g-notify GROUP g BACKUP 0", "g-stop", "g-notify GROUP g STOP 0"}},
		// a alone leaves and comes back: the group never left BACKUP.
		{name: "no change of the common state", events: [][]vrrp.Event{start,
			{ev("a", "g", vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown), ev("a", "g", vrrp.Master, vrrp.Backup, vrrp.CauseHigherPeer)}},
			want: []string{"g-backup", "g-notify GROUP g BACKUP 0"}},
		{name: "mixed states", events: [][]vrrp.Event{start, {ev("a", "g", vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown)},
			{ev("b", "g", vrrp.Backup, vrrp.Fault, vrrp.CauseFault)}},
			want: []string{"g-backup", "g-notify GROUP g BACKUP 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir, out := notifyTestDirs(t)
			cfg := &config.Config{
				VRRP: []config.VRRPInstance{{Name: "a", Priority: 150, Notify: notifyTestPrograms(t, dir, out, "a", "notify")},
					{Name: "b", Priority: 150}},
				VRRPSyncGroups: []config.VRRPSyncGroup{{Name: "g", Instances: []string{"a", "b"},
					Notify: notifyTestPrograms(t, dir, out, "g", "notify", "master", "backup", "fault", "stop")}},
			}
			n := notifyTestNew(t, cfg, nil, NotifyOptions{})
			var wantA []string
			for _, step := range tt.events {
				for _, e := range step {
					n.Event(e)
					if e.Instance == "a" {
						wantA = append(wantA, "a-notify INSTANCE a "+notifyState(e.Transition)+" 150")
					}
				}
			}
			notifyTestClose(t, n)
			if got := notifyTestLines(t, out, "g"); !slices.Equal(got, tt.want) {
				t.Errorf("group programs ran:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			if got := notifyTestLines(t, out, "a"); !slices.Equal(got, wantA) {
				t.Errorf("member programs ran:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantA, "\n"))
			}
		})
	}
}

// TestNotifierHung: a hung program is killed at the timeout, with its
// group; Event does not wait for it; the instance's next notification
// runs after it, and other instances' meanwhile.
func TestNotifierHung(t *testing.T) {
	t.Parallel()
	dir, out := notifyTestDirs(t)
	pidFile := filepath.Join(filepath.Dir(out), "hung")
	hang := config.Notify{
		Master: notifyTestScript(t, dir, "hang-master", out, "echo 'hanging' >&2\nsleep 60 &\necho $! > "+pidFile+"\nwait"),
		Backup: notifyTestScript(t, dir, "hang-backup", out, ""),
	}
	cfg := &config.Config{VRRP: []config.VRRPInstance{{Name: "hang", Notify: hang},
		{Name: "other", Notify: notifyTestPrograms(t, dir, out, "other", "notify")}}}
	log, logs := notifyTestLogger()
	const timeout = 500 * time.Millisecond
	n := notifyTestNew(t, cfg, log, NotifyOptions{Timeout: timeout, MaxRunning: 2})
	start := time.Now()
	n.Event(ev("hang", "", vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown))
	n.Event(ev("hang", "", vrrp.Master, vrrp.Backup, vrrp.CauseHigherPeer))
	n.Event(ev("other", "", vrrp.Init, vrrp.Backup, vrrp.CauseStart))
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("Event took %s", d)
	}
	// other's program runs while hang's hangs.
	for len(notifyTestLines(t, out, "other")) == 0 {
		if time.Since(start) > timeout*8/10 {
			t.Fatal("another instance's program waited for the hung one")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := notifyTestLines(t, out, "hang"); len(got) != 0 {
		t.Errorf("hang's BACKUP ran before its MASTER was done: %q", got)
	}
	notifyTestClose(t, n)
	if d := time.Since(start); d < timeout || d > timeout+3*time.Second {
		t.Errorf("the hung program ran for %s; want about %s", d, timeout)
	}
	if got, want := notifyTestLines(t, out, "hang"), []string{"hang-backup"}; !slices.Equal(got, want) {
		t.Errorf("hang's programs that finished: %q; want %q", got, want)
	}
	notifyTestAwaitGone(t, pidFile)
	if l := logs.String(); !strings.Contains(l, "VRRP notify program failed") || !strings.Contains(l, `error="timeout after 500ms: hanging"`) {
		t.Errorf("log:\n%s\nwant the hung program's failure with its stderr", l)
	}
}

// notifyTestAwaitGone waits for the process whose PID is in file to die
// (be gone, or a zombie).
func notifyTestAwaitGone(t *testing.T, file string) {
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

// blockingRunner records the programs run and blocks each until released.
type blockingRunner struct {
	mu         sync.Mutex
	ran        []string
	running    int
	maxRunning int
	release    chan struct{}
}

func (r *blockingRunner) run(ctx context.Context, c sandbox.Command) error {
	r.mu.Lock()
	r.ran = append(r.ran, strings.Join(append([]string{filepath.Base(c.Path)}, c.Args...), " "))
	r.running++
	r.maxRunning = max(r.maxRunning, r.running)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.running--
		r.mu.Unlock()
	}()
	select {
	case <-r.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// awaitRunning waits until want programs are running.
func (r *blockingRunner) awaitRunning(t *testing.T, want int) {
	t.Helper()
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		if running == want {
			return
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d programs running; want %d", running, want)
		}
	}
}

// TestNotifierBounds: what waits behind a program that runs is bounded
// per instance (the oldest waiting is dropped), and so is how many run at
// once.
func TestNotifierBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                   string
		instances, transitions int
		maxRunning, maxQueued  int
		wantRan                []string // for one instance, in order
		wantDropped            int
	}{
		{name: "flapping instance", instances: 1, transitions: 10, maxRunning: 4, maxQueued: 3,
			// The first runs; of the 9 that wait, the last 3 are kept.
			wantRan: []string{"vi0 INSTANCE vi0 MASTER 150", "vi0 INSTANCE vi0 BACKUP 150", "vi0 INSTANCE vi0 MASTER 150", "vi0 INSTANCE vi0 BACKUP 150"}, wantDropped: 6},
		{name: "many instances", instances: 12, transitions: 2, maxRunning: 3, maxQueued: 8,
			wantRan: []string{"vi0 INSTANCE vi0 MASTER 150", "vi0 INSTANCE vi0 BACKUP 150"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := &config.Config{}
			for i := range tt.instances {
				name := fmt.Sprintf("vi%d", i)
				cfg.VRRP = append(cfg.VRRP, config.VRRPInstance{Name: name, Notify: config.Notify{Any: "/notify/" + name}})
			}
			r := &blockingRunner{release: make(chan struct{})}
			log, logs := notifyTestLogger()
			n := notifyTestNew(t, cfg, log, NotifyOptions{MaxRunning: tt.maxRunning, MaxQueued: tt.maxQueued, User: "root", Run: r.run})
			for k := range tt.transitions {
				for i := range tt.instances {
					from, to := vrrp.Backup, vrrp.Master
					if k%2 == 1 {
						from, to = to, from
					}
					n.Event(ev(fmt.Sprintf("vi%d", i), "", from, to, vrrp.CauseMasterDown))
				}
			}
			// Let the runs fill the slots, and more start if they could.
			want := min(tt.instances, tt.maxRunning)
			r.awaitRunning(t, want)
			time.Sleep(50 * time.Millisecond)
			n.mu.Lock()
			queued := 0
			for _, q := range n.queues {
				queued += len(q)
			}
			n.mu.Unlock()
			if limit := tt.instances * tt.maxQueued; queued > limit {
				t.Errorf("%d notifications wait; want at most %d", queued, limit)
			}
			close(r.release)
			notifyTestClose(t, n)
			var got []string
			for _, s := range r.ran {
				if strings.HasPrefix(s, "vi0 ") {
					got = append(got, s)
				}
			}
			if !slices.Equal(got, tt.wantRan) {
				t.Errorf("vi0's programs ran: %q; want %q", got, tt.wantRan)
			}
			if len(r.ran) != tt.instances*len(tt.wantRan) || r.maxRunning != want {
				t.Errorf("%d programs ran, %d at most at once; want %d, %d", len(r.ran), r.maxRunning, tt.instances*len(tt.wantRan), want)
			}
			if got := strings.Count(logs.String(), "oldest waiting notification is dropped"); got != tt.wantDropped {
				t.Errorf("%d drops logged; want %d", got, tt.wantDropped)
			}
		})
	}
}

// TestNotifierNoShell: a program's path is executed as it is, spaces and
// shell syntax included: through a shell, "a b;exit 9" would not even
// find the program.
func TestNotifierNoShell(t *testing.T) {
	t.Parallel()
	dir, out := notifyTestDirs(t)
	odd := filepath.Join(dir, "a b;exit 9;$(exit 9)")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := notifyTestScript(t, odd, "vi-notify `exit 9` * > x", out, "")
	cfg := &config.Config{VRRP: []config.VRRPInstance{{Name: "vi", Priority: 7, Notify: config.Notify{Any: prog}}}}
	log, logs := notifyTestLogger()
	n := notifyTestNew(t, cfg, log, NotifyOptions{})
	n.Event(ev("vi", "", vrrp.Backup, vrrp.Master, vrrp.CauseMasterDown))
	notifyTestClose(t, n)
	if got, want := notifyTestLines(t, out, "vi"), []string{"vi-notify `exit 9` * > x INSTANCE vi MASTER 150"}; !slices.Equal(got, want) {
		t.Errorf("ran %q; want %q (log: %s)", got, want, logs)
	}
}

// TestNotifierClose: a Close whose ctx ends kills what runs, drops what
// waits, and says so; events after Close are ignored.
func TestNotifierClose(t *testing.T) {
	t.Parallel()
	r := &blockingRunner{release: make(chan struct{})}
	cfg := &config.Config{VRRP: []config.VRRPInstance{{Name: "vi", Notify: config.Notify{Stop: "/stop"}}}}
	n := notifyTestNew(t, cfg, nil, NotifyOptions{Run: r.run})
	n.Event(ev("vi", "", vrrp.Backup, vrrp.Init, vrrp.CauseStop))
	n.Event(ev("vi", "", vrrp.Backup, vrrp.Init, vrrp.CauseStop))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := n.Close(ctx); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("Close: %v after %s; want an error after about 100ms", err, time.Since(start))
	}
	n.Event(ev("vi", "", vrrp.Backup, vrrp.Init, vrrp.CauseStop))
	if len(r.ran) != 1 {
		t.Errorf("ran %q; want only the first", r.ran)
	}
}

func TestNewNotifierUser(t *testing.T) {
	t.Parallel()
	withProgram := &config.Config{VRRP: []config.VRRPInstance{{Name: "vi", Notify: config.Notify{Master: "/bin/true"}}}}
	without := &config.Config{VRRP: []config.VRRPInstance{{Name: "vi"}}}
	for _, tt := range []struct {
		name    string
		cfg     *config.Config
		user    string
		wantErr bool
	}{
		{"unknown user", withProgram, "lbd-no-such-user", true},
		{"unknown user, no programs", without, "lbd-no-such-user", false},
		{"default user", withProgram, "", false},
	} {
		n, err := NewNotifier(tt.cfg, nil, NotifyOptions{User: tt.user})
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: NewNotifier: %v; want an error %v", tt.name, err, tt.wantErr)
		}
		if n != nil {
			n.Close(context.Background())
		}
	}
}
