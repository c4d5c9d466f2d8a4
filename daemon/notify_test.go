package daemon

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane"
)

// notifySocket listens where systemd would and returns the messages lbd
// sends to it.
func notifySocket(t *testing.T) func(wait time.Duration) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	// read returns what arrives within d.
	return func(d time.Duration) []string {
		var out []string
		buf := make([]byte, 4096)
		c.SetReadDeadline(time.Now().Add(d))
		for {
			n, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return out
				}
				t.Fatal(err)
			}
			out = append(out, string(buf[:n]))
		}
	}
}

func TestNotifierReadyOnce(t *testing.T) {
	read := notifySocket(t)
	n := &notifier{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n.onSync(dataplane.SyncResult{Waiting: true})
	n.onSync(dataplane.SyncResult{Services: 3, Start: time.Now(), Err: errors.New("ipvs: one service failed")})
	n.onSync(dataplane.SyncResult{Services: 3, Start: time.Now()})
	n.stopping()
	got := read(200 * time.Millisecond)
	want := []string{"STATUS=waiting", "READY=1", "STATUS=3 virtual servers", "STATUS=3 virtual servers", "STOPPING=1"}
	if len(got) != len(want) {
		t.Fatalf("messages %q; want %d like %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("message %d = %q; want prefix %q", i, got[i], w)
		}
	}
	if !strings.HasSuffix(got[2], "failed, retrying") {
		t.Errorf("a failed sync is ready but says so: %q", got[2])
	}
}

type fakeLoop struct {
	mu    sync.Mutex
	start time.Time
}

func (f *fakeLoop) SyncingSince() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.start, !f.start.IsZero()
}

func TestWatchdogStopsWhenASyncHangs(t *testing.T) {
	read := notifySocket(t)
	t.Setenv("WATCHDOG_USEC", "100000") // 100 ms
	n := &notifier{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	loop := &fakeLoop{}
	go watchdog(t.Context(), n.log, n, loop)
	if got := read(300 * time.Millisecond); len(got) < 2 || got[0] != "WATCHDOG=1" {
		t.Fatalf("an idle loop is not reported alive: %q", got)
	}
	loop.mu.Lock()
	loop.start = time.Now() // a sync starts and never ends
	loop.mu.Unlock()
	time.Sleep(150 * time.Millisecond) // longer than the period
	read(10 * time.Millisecond)        // what was sent before it hung
	if got := read(300 * time.Millisecond); len(got) != 0 {
		t.Errorf("a hung sync still feeds the watchdog: %q", got)
	}
}

func TestReadyAfterGraceWhenNoSyncRuns(t *testing.T) {
	read := notifySocket(t)
	n := &notifier{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	go n.readyAfterGrace(t.Context(), 50*time.Millisecond)
	n.onSync(dataplane.SyncResult{Waiting: true})
	got := read(300 * time.Millisecond)
	if len(got) != 3 || !strings.HasPrefix(got[0], "STATUS=waiting") || got[1] != "READY=1" || !strings.Contains(got[2], "waiting for every source") {
		t.Fatalf("messages %q; want waiting, then READY=1 after the grace with a status saying why", got)
	}
	// A later first sync does not say READY again.
	n.onSync(dataplane.SyncResult{Services: 1, Start: time.Now()})
	if got := read(100 * time.Millisecond); len(got) != 1 || !strings.HasPrefix(got[0], "STATUS=1 virtual servers") {
		t.Errorf("after the first sync: %q", got)
	}
}
