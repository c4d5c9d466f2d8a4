package file

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// patience bounds every wait; tests never assert latencies.
const patience = 10 * time.Second

// fakeLoader stands in for config.Load: it reads the same files (the main
// file and conf.d/*.toml) but rejects only empty files and any content
// saying INVALID. It remembers what each returned snapshot was made of.
type fakeLoader struct {
	mu      sync.Mutex
	calls   int
	content map[*config.Config]string
}

func newFakeLoader() *fakeLoader { return &fakeLoader{content: map[*config.Config]string{}} }

func (f *fakeLoader) load(path string) (*config.Config, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()

	files, err := config.Files(path)
	if err != nil {
		return nil, err
	}
	var parts []string
	for i, f := range files {
		data, err := config.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		if len(data) == 0 {
			return nil, fmt.Errorf("%s: empty", f)
		}
		name := filepath.Base(f)
		if i == 0 {
			name = "main"
		}
		parts = append(parts, name+"="+string(data))
	}
	s := strings.Join(parts, " ")
	if strings.Contains(s, "INVALID") {
		return nil, fmt.Errorf("%s:1: INVALID content", path)
	}
	cfg := &config.Config{Files: files}
	f.mu.Lock()
	f.content[cfg] = s
	f.mu.Unlock()
	return cfg, nil
}

func (f *fakeLoader) of(cfg *config.Config) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.content[cfg]
	if !ok {
		return fmt.Sprintf("<unknown snapshot %p>", cfg)
	}
	return s
}

func (f *fakeLoader) numCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// syncBuffer collects log output from Run's goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type harness struct {
	t      *testing.T
	root   string // parent of the configuration directory
	dir    string // the configuration directory, root/lbd
	main   string // dir/lbd.toml
	src    *Source
	fl     *fakeLoader
	logs   *syncBuffer
	cancel context.CancelFunc
	done   chan error
}

// start writes files (relative to the configuration directory; a nil map
// leaves it absent), then creates and runs a Source on it.
func start(t *testing.T, files map[string]string, tweak func(*Options, *Source)) *harness {
	t.Helper()
	root := t.TempDir()
	h := &harness{
		t:    t,
		root: root,
		dir:  filepath.Join(root, "lbd"),
		fl:   newFakeLoader(),
		logs: &syncBuffer{},
		done: make(chan error, 1),
	}
	h.main = filepath.Join(h.dir, "lbd.toml")
	if files != nil {
		mkdir(t, h.dir)
	}
	for name, content := range files {
		mkdir(t, filepath.Dir(h.path(name)))
		h.write(name, content)
	}
	opts := Options{
		Path:     h.main,
		Load:     h.fl.load,
		Debounce: 50 * time.Millisecond,
		Logger:   slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tweak != nil {
		tweak(&opts, nil)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(&opts, s)
	}
	h.src = s
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		h.stop()
		// Logs help when a test fails; LBD_TEST_LOGS=1 shows them always.
		if t.Failed() || os.Getenv("LBD_TEST_LOGS") != "" {
			t.Logf("logs:\n%s", h.logs.String())
		}
	})
	return h
}

// stop cancels Run and waits for it to return; it is idempotent.
func (h *harness) stop() {
	h.t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("Run: %v", err)
		}
	case <-time.After(patience):
		h.t.Fatal("Run did not return after cancel")
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) path(name string) string { return filepath.Join(h.dir, name) }

// write writes a file in place (truncate and write), as `echo >` does.
func (h *harness) write(name, content string) {
	h.t.Helper()
	if err := os.WriteFile(h.path(name), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) rename(from, to string) {
	h.t.Helper()
	if err := os.Rename(h.path(from), h.path(to)); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) remove(name string) {
	h.t.Helper()
	if err := os.RemoveAll(h.path(name)); err != nil {
		h.t.Fatal(err)
	}
}

// next returns the content of the next snapshot.
func (h *harness) next() string {
	h.t.Helper()
	select {
	case cfg, ok := <-h.src.Updates():
		if !ok {
			h.t.Fatal("Updates closed")
		}
		return h.fl.of(cfg)
	case <-time.After(patience):
		h.t.Fatalf("no snapshot within %v", patience)
	}
	return ""
}

// waitFor reads snapshots until one has content want, and returns how many
// it read. Intermediate snapshots are allowed: an edit may take several
// writes.
func (h *harness) waitFor(want string) int {
	h.t.Helper()
	deadline := time.After(patience)
	var seen []string
	for {
		select {
		case cfg, ok := <-h.src.Updates():
			if !ok {
				h.t.Fatal("Updates closed")
			}
			got := h.fl.of(cfg)
			seen = append(seen, got)
			if got == want {
				return len(seen)
			}
		case <-deadline:
			h.t.Fatalf("no snapshot %q within %v; saw %q; status %+v", want, patience, seen, h.src.Status())
		}
	}
}

// noPending checks that no snapshot is waiting to be read.
func (h *harness) noPending() {
	h.t.Helper()
	select {
	case cfg := <-h.src.Updates():
		h.t.Fatalf("unexpected snapshot %q", h.fl.of(cfg))
	default:
	}
}

// waitStatus polls Status until cond holds.
func (h *harness) waitStatus(what string, cond func(Status) bool) Status {
	h.t.Helper()
	deadline := time.Now().Add(patience)
	for {
		st := h.src.Status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("status never got %s: %+v", what, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCalls polls until the loader has been called more than n times.
func (h *harness) waitCalls(n int) {
	h.t.Helper()
	deadline := time.Now().Add(patience)
	for h.fl.numCalls() <= n {
		if time.Now().After(deadline) {
			h.t.Fatalf("loader not called again within %v", patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
