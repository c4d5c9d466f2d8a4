package file

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

func TestInitialSnapshot(t *testing.T) {
	h := start(t, map[string]string{
		"lbd.toml":      "v1",
		"conf.d/a.toml": "a1",
		"conf.d/b.toml": "b1",
		"conf.d/c.swp":  "ignored",
	}, nil)
	if got, want := h.next(), "main=v1 a.toml=a1 b.toml=b1"; got != want {
		t.Fatalf("first snapshot %q, want %q", got, want)
	}
	st := h.src.Status()
	if st.Loaded.IsZero() || st.Err != nil || st.WatchErr != nil || len(st.Hash) != 12 {
		t.Errorf("status %+v", st)
	}
	wantFiles := []string{h.main, h.path("conf.d/a.toml"), h.path("conf.d/b.toml")}
	if fmt.Sprint(st.Files) != fmt.Sprint(wantFiles) {
		t.Errorf("Files %q, want %q", st.Files, wantFiles)
	}
	if n := strings.Count(h.logs.String(), "configuration applied"); n != 1 {
		t.Errorf("%d 'configuration applied' lines, want 1", n)
	}
}

// TestChanges applies sequences of edits, each expected to end in a
// snapshot with the given content.
func TestChanges(t *testing.T) {
	type step struct {
		name string
		do   func(h *harness)
		want string
	}
	tests := []struct {
		name  string
		files map[string]string
		steps []step
	}{
		{
			name:  "in-place edits",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"main", func(h *harness) { h.write("lbd.toml", "v2") }, "main=v2 a.toml=a1"},
				{"conf.d", func(h *harness) { h.write("conf.d/a.toml", "a2") }, "main=v2 a.toml=a2"},
			},
		},
		{
			name:  "vim-style save",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"main", func(h *harness) { vimSave(h, "lbd.toml", "v2") }, "main=v2 a.toml=a1"},
				{"conf.d", func(h *harness) { vimSave(h, "conf.d/a.toml", "a2") }, "main=v2 a.toml=a2"},
				{"main again", func(h *harness) { vimSave(h, "lbd.toml", "v3") }, "main=v3 a.toml=a2"},
			},
		},
		{
			name:  "sed -i",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"main", func(h *harness) { sedInPlace(h, "lbd.toml", "v2") }, "main=v2 a.toml=a1"},
				{"conf.d", func(h *harness) { sedInPlace(h, "conf.d/a.toml", "a2") }, "main=v2 a.toml=a2"},
				{"main again", func(h *harness) { sedInPlace(h, "lbd.toml", "v3") }, "main=v3 a.toml=a2"},
			},
		},
		{
			name:  "conf.d files added, renamed, removed",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"add", func(h *harness) { h.write("conf.d/b.toml", "b1") }, "main=v1 a.toml=a1 b.toml=b1"},
				{"rename", func(h *harness) { h.rename("conf.d/a.toml", "conf.d/c.toml") }, "main=v1 b.toml=b1 c.toml=a1"},
				{"disable", func(h *harness) { h.rename("conf.d/b.toml", "conf.d/b.toml.off") }, "main=v1 c.toml=a1"},
				{"enable", func(h *harness) { h.rename("conf.d/b.toml.off", "conf.d/b.toml") }, "main=v1 b.toml=b1 c.toml=a1"},
				{"remove", func(h *harness) { h.remove("conf.d/c.toml") }, "main=v1 b.toml=b1"},
			},
		},
		{
			name:  "conf.d created after start, removed, re-created",
			files: map[string]string{"lbd.toml": "v1"},
			steps: []step{
				{"create", func(h *harness) {
					mkdir(h.t, h.path("conf.d"))
					h.write("conf.d/a.toml", "a1")
				}, "main=v1 a.toml=a1"},
				// The watch on the new directory must work, not only the
				// reload that followed its creation.
				{"edit inside", func(h *harness) { h.write("conf.d/a.toml", "a2") }, "main=v1 a.toml=a2"},
				{"remove", func(h *harness) { h.remove("conf.d") }, "main=v1"},
				{"re-create", func(h *harness) {
					mkdir(h.t, h.path("conf.d"))
					h.write("conf.d/b.toml", "b1")
				}, "main=v1 b.toml=b1"},
				{"edit inside again", func(h *harness) { h.write("conf.d/b.toml", "b2") }, "main=v1 b.toml=b2"},
			},
		},
		{
			name:  "conf.d renamed away and replaced",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"rename away", func(h *harness) { h.rename("conf.d", "conf.d.old") }, "main=v1"},
				{"replace", func(h *harness) {
					mkdir(h.t, h.path("conf.d.new"))
					h.write("conf.d.new/b.toml", "b1")
					h.rename("conf.d.new", "conf.d")
				}, "main=v1 b.toml=b1"},
				// Edits in the old directory don't matter; the new one's do.
				{"edit new", func(h *harness) {
					h.write("conf.d.old/a.toml", "a2")
					h.write("conf.d/b.toml", "b2")
				}, "main=v1 b.toml=b2"},
			},
		},
		{
			name:  "main directory removed and re-created",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"remove and re-create", func(h *harness) {
					h.remove("")
					h.waitStatus("a watch error", func(st Status) bool { return st.WatchErr != nil })
					mkdir(h.t, h.path("conf.d"))
					h.write("conf.d/a.toml", "a2")
					h.write("lbd.toml", "v2")
				}, "main=v2 a.toml=a2"},
				{"edit after", func(h *harness) { h.write("lbd.toml", "v3") }, "main=v3 a.toml=a2"},
				{"edit conf.d after", func(h *harness) { h.write("conf.d/a.toml", "a3") }, "main=v3 a.toml=a3"},
			},
		},
		{
			name:  "main directory replaced by rename",
			files: map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"},
			steps: []step{
				{"swap", func(h *harness) {
					next := filepath.Join(h.root, "lbd.next")
					mkdir(h.t, filepath.Join(next, "conf.d"))
					for name, content := range map[string]string{"lbd.toml": "v2", "conf.d/a.toml": "a2"} {
						if err := os.WriteFile(filepath.Join(next, name), []byte(content), 0o644); err != nil {
							h.t.Fatal(err)
						}
					}
					if err := os.Rename(h.dir, filepath.Join(h.root, "lbd.old")); err != nil {
						h.t.Fatal(err)
					}
					if err := os.Rename(next, h.dir); err != nil {
						h.t.Fatal(err)
					}
				}, "main=v2 a.toml=a2"},
				{"edit after", func(h *harness) { h.write("lbd.toml", "v3") }, "main=v3 a.toml=a2"},
				{"edit conf.d after", func(h *harness) { h.write("conf.d/a.toml", "a3") }, "main=v3 a.toml=a3"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, tt.files, nil)
			h.next()
			for _, s := range tt.steps {
				s.do(h)
				h.waitFor(s.want)
			}
			if st := h.src.Status(); st.Err != nil || st.WatchErr != nil {
				t.Errorf("status after the last step: %+v", st)
			}
		})
	}
}

// vimSave saves like vim: probe file 4913 and swap file in the directory,
// the new content written under a temporary name and renamed over.
func vimSave(h *harness, name, content string) {
	h.t.Helper()
	dir, base := filepath.Split(name)
	swp := filepath.Join(dir, "."+base+".swp")
	h.write(swp, "swap")
	h.write(filepath.Join(dir, "4913"), "")
	h.remove(filepath.Join(dir, "4913"))
	h.write(name+"~", "backup")
	h.write(filepath.Join(dir, "."+base+".tmp"), content)
	h.rename(filepath.Join(dir, "."+base+".tmp"), name)
	h.remove(swp)
	h.remove(name + "~")
}

// sedInPlace saves like sed -i: a temporary file in the same directory
// renamed over the original.
func sedInPlace(h *harness, name, content string) {
	h.t.Helper()
	tmp := filepath.Join(filepath.Dir(name), "sedX1b2c3")
	h.write(tmp, content)
	h.rename(tmp, name)
}

func TestInvalidKeepsLastGood(t *testing.T) {
	h := start(t, map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"}, nil)
	h.next()
	good := h.src.Status()

	h.write("conf.d/a.toml", "INVALID")
	st := h.waitStatus("the rejection", func(st Status) bool {
		return st.Err != nil && strings.Contains(st.Err.Error(), "INVALID")
	})
	h.noPending()
	if st.ErrTime.IsZero() || st.Hash != good.Hash || !st.Loaded.Equal(good.Loaded) ||
		fmt.Sprint(st.Files) != fmt.Sprint(good.Files) {
		t.Errorf("after a rejected edit: status %+v, want the last good one %+v with an error", st, good)
	}
	if !strings.Contains(h.logs.String(), "configuration rejected") {
		t.Errorf("rejection not logged:\n%s", h.logs)
	}

	h.write("conf.d/a.toml", "a2")
	h.waitFor("main=v1 a.toml=a2")
	if st := h.src.Status(); st.Err != nil || !st.ErrTime.IsZero() || st.Hash == good.Hash {
		t.Errorf("after a good edit: status %+v", st)
	}
}

// Reverting a rejected edit restores the files of the configuration in
// force: nothing new to emit, but the error is gone.
func TestRevertAfterInvalid(t *testing.T) {
	h := start(t, map[string]string{"lbd.toml": "v1"}, nil)
	h.next()
	h.write("lbd.toml", "INVALID")
	h.waitStatus("the rejection", func(st Status) bool { return st.Err != nil })
	h.write("lbd.toml", "v1")
	h.waitStatus("no error", func(st Status) bool { return st.Err == nil })
	h.noPending()
	if !strings.Contains(h.logs.String(), "configuration unchanged") {
		t.Errorf("revert not logged:\n%s", h.logs)
	}
}

func TestInitialLoadFails(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		fix   func(h *harness)
	}{
		{"invalid", map[string]string{"lbd.toml": "INVALID"}, func(h *harness) { h.write("lbd.toml", "v1") }},
		{"main file missing", map[string]string{"conf.d/x.conf": ""}, func(h *harness) { h.write("lbd.toml", "v1") }},
		{"directory missing", nil, func(h *harness) {
			mkdir(h.t, h.dir)
			h.write("lbd.toml", "v1")
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, tt.files, nil)
			st := h.waitStatus("an error", func(st Status) bool { return st.Err != nil })
			h.noPending()
			if !st.Loaded.IsZero() || st.Files != nil {
				t.Errorf("status %+v claims a configuration", st)
			}
			tt.fix(h)
			h.waitFor("main=v1")
			if st := h.src.Status(); st.Err != nil || st.WatchErr != nil || st.Loaded.IsZero() {
				t.Errorf("status after the fix: %+v", st)
			}
		})
	}
}

func TestUnchangedNotEmitted(t *testing.T) {
	h := start(t, map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"}, nil)
	h.next()

	n := h.fl.numCalls()
	h.write("lbd.toml", "v1") // same content: events, reload, no snapshot
	h.waitCalls(n)
	n = h.fl.numCalls()
	h.src.Reload()
	h.waitCalls(n)
	h.noPending()

	// A real change still goes through afterwards.
	h.write("lbd.toml", "v2")
	h.waitFor("main=v2 a.toml=a1")
}

func TestReload(t *testing.T) {
	// With an endless debounce only Reload can pick up the edit.
	h := start(t, map[string]string{"lbd.toml": "v1"}, func(o *Options, _ *Source) { o.Debounce = time.Hour })
	h.next()
	h.write("lbd.toml", "v2")
	h.src.Reload()
	h.waitFor("main=v2")
}

func TestRecheck(t *testing.T) {
	// With an endless debounce only the periodic re-check can pick up the
	// edit, as it would after events were lost.
	h := start(t, map[string]string{"lbd.toml": "v1"}, func(o *Options, s *Source) {
		o.Debounce = time.Hour
		if s != nil {
			s.recheck = 50 * time.Millisecond
		}
	})
	h.next()
	h.write("lbd.toml", "v2")
	h.waitFor("main=v2")

	// An unchanged, rejected configuration is not re-read on every tick.
	h.write("lbd.toml", "INVALID")
	h.waitStatus("the rejection", func(st Status) bool { return st.Err != nil })
	n := h.fl.numCalls()
	time.Sleep(500 * time.Millisecond) // ~10 ticks
	if m := h.fl.numCalls(); m != n {
		t.Errorf("loader called %d more times for unchanged files", m-n)
	}
}

func TestBurstIsDebounced(t *testing.T) {
	h := start(t, map[string]string{"lbd.toml": "v0"}, func(o *Options, _ *Source) { o.Debounce = DefaultDebounce })
	h.next()
	for i := 1; i <= 50; i++ {
		h.write("lbd.toml", fmt.Sprintf("v%d", i))
	}
	n := h.waitFor("main=v50")
	// A loaded CI machine may split the burst; 50 snapshots would mean no
	// debouncing at all.
	if n > 5 {
		t.Errorf("%d snapshots for one burst of 50 writes", n)
	}
}

func TestSlowConsumerGetsLatest(t *testing.T) {
	h := start(t, map[string]string{"lbd.toml": "v0"}, nil)
	h.waitStatus("a configuration", func(st Status) bool { return !st.Loaded.IsZero() })
	// Nobody reads while three configurations are applied.
	for i := 1; i <= 3; i++ {
		prev := h.src.Status().Hash
		h.write("lbd.toml", fmt.Sprintf("v%d", i))
		h.waitStatus("a new configuration", func(st Status) bool { return st.Hash != prev })
	}
	if got := h.next(); got != "main=v3" {
		t.Errorf("slow consumer got %q, want the latest, main=v3", got)
	}
	h.noPending()
}

func TestRunStops(t *testing.T) {
	before := runtime.NumGoroutine()
	h := start(t, map[string]string{"lbd.toml": "v1", "conf.d/a.toml": "a1"}, nil)
	h.next()
	h.stop()
	if _, ok := <-h.src.Updates(); ok {
		t.Error("Updates not closed after Run returned")
	}
	// fsnotify's reader and Run's goroutine are gone.
	deadline := time.Now().Add(patience)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := h.src.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Options{Debounce: -1}); err == nil {
		t.Error("negative debounce accepted")
	}
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.path != config.DefaultPath || s.confDir != filepath.Join(filepath.Dir(config.DefaultPath), "conf.d") || s.debounce != DefaultDebounce {
		t.Errorf("defaults: %+v", s)
	}
}

func TestRelevant(t *testing.T) {
	s, err := New(Options{Path: "/etc/lbd/lbd.toml", Load: newFakeLoader().load})
	if err != nil {
		t.Fatal(err)
	}
	l := &loop{Source: s}
	for name, want := range map[string]bool{
		"/etc/lbd/lbd.toml":              true,
		"/etc/lbd":                       true,
		"/etc/lbd/conf.d":                true,
		"/etc/lbd/conf.d/a.toml":         true,
		"/etc/lbd/conf.d/..data":         true,
		"/etc/lbd/..data":                true,
		"/etc/lbd/.lbd.toml.swp":         false,
		"/etc/lbd/.lbd.toml.swx":         false,
		"/etc/lbd/4913":                  false,
		"/etc/lbd/lbd.toml~":             false,
		"/etc/lbd/sedAbc123":             false,
		"/etc/lbd/other.toml":            false,
		"/etc/lbd/conf.d/.a.toml.swp":    false,
		"/etc/lbd/conf.d/a.toml~":        false,
		"/etc/lbd/conf.d/4913":           false,
		"/etc/lbd/conf.d/.#a.toml":       false,
		"/etc/lbd/conf.d/.hidden.toml":   false,
		"/etc/lbd/conf.d/a.toml.disable": false,
		"/etc/lbd/conf.d/sub/a.toml":     false,
		"/etc/other/lbd.toml":            false,
	} {
		if got := l.relevant(name); got != want {
			t.Errorf("relevant(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestRealConfig runs the Source with config.Load on a tiny configuration.
func TestRealConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "lbd")
	main := filepath.Join(dir, "lbd.toml")
	web := filepath.Join(dir, "conf.d", "web.toml")
	mkdir(t, filepath.Dir(web))
	put := func(p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const service = `
[[service]]
name = "%s"
vips = ["192.0.2.%d"]
port = 80
`
	put(main, "[sync]\nburst = 3\n")
	put(web, fmt.Sprintf(service, "web", 10))

	s, err := New(Options{Path: main, Debounce: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	next := func() *config.Config {
		t.Helper()
		select {
		case cfg := <-s.Updates():
			return cfg
		case <-time.After(patience):
			t.Fatalf("no snapshot; status %+v", s.Status())
		}
		return nil
	}
	names := func(cfg *config.Config) (out []string) {
		for _, svc := range cfg.Services {
			out = append(out, svc.Name)
		}
		return out
	}

	cfg := next()
	if cfg.Sync.Burst != 3 || fmt.Sprint(names(cfg)) != "[web]" || fmt.Sprint(cfg.Files) != fmt.Sprint([]string{main, web}) {
		t.Fatalf("first snapshot: burst %d, services %v, files %v", cfg.Sync.Burst, names(cfg), cfg.Files)
	}

	// An unknown key is rejected with its file and line; nothing is emitted.
	put(web, fmt.Sprintf(service, "web", 10)+"schedular = \"rr\"\n")
	deadline := time.Now().Add(patience)
	for s.Status().Err == nil {
		if time.Now().After(deadline) {
			t.Fatalf("edit not rejected; status %+v", s.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Status().Err.Error(); !strings.Contains(err, "web.toml:6") || !strings.Contains(err, "schedular") {
		t.Errorf("rejection %q does not point at web.toml:6", err)
	}
	select {
	case cfg := <-s.Updates():
		t.Fatalf("rejected edit emitted services %v", names(cfg))
	default:
	}

	put(web, fmt.Sprintf(service, "web", 10)+fmt.Sprintf(service, "api", 11))
	for cfg = next(); fmt.Sprint(names(cfg)) != "[web api]"; cfg = next() {
	}
	if st := s.Status(); st.Err != nil {
		t.Errorf("status after a good edit: %+v", st)
	}
}
