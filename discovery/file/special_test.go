package file

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
)

// TestSpecialFilesInConfD checks that a FIFO or a symlink to /dev/zero
// appearing in conf.d is rejected with its name, without blocking the
// watcher or filling the memory (a FIFO blocked the file source forever,
// /dev/zero read until out of memory), and that a later good edit is still
// applied.
func TestSpecialFilesInConfD(t *testing.T) {
	tests := []struct {
		name string
		make func(path string) error
		want string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, "x.toml: not a regular file (a FIFO); lbd reads only regular files"},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, "x.toml: not a regular file (a character device)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "lbd")
			main := filepath.Join(dir, "lbd.toml")
			mkdir(t, filepath.Join(dir, "conf.d"))
			put := func(text string) {
				t.Helper()
				if err := os.WriteFile(main, []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			put("[sync]\nburst = 3\n")
			s, err := New(Options{Path: main, Debounce: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() {
				cancel()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("Run: %v", err)
					}
				case <-time.After(patience):
					t.Errorf("Run did not return: the watcher is blocked")
				}
			}()
			burst := func() int {
				t.Helper()
				select {
				case cfg := <-s.Updates():
					return cfg.Sync.Burst
				case <-time.After(patience):
					t.Fatalf("no snapshot; status %+v", s.Status())
				}
				return 0
			}
			if b := burst(); b != 3 {
				t.Fatalf("burst %d", b)
			}

			special := filepath.Join(dir, "conf.d", "x.toml")
			if err := tt.make(special); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(patience)
			for st := s.Status(); st.Err == nil || !strings.Contains(st.Err.Error(), tt.want); st = s.Status() {
				if time.Now().After(deadline) {
					t.Fatalf("not rejected; status %+v", st)
				}
				time.Sleep(10 * time.Millisecond)
			}

			// The watcher goes on: an edit with the file still there is
			// rejected again, and once it is gone the next edit applies.
			put("[sync]\nburst = 4\n")
			if err := os.Remove(special); err != nil {
				t.Fatal(err)
			}
			if b := burst(); b != 4 {
				t.Fatalf("burst %d after the good edit", b)
			}
			if h, err := Hash(main); err != nil || h == "" {
				t.Errorf("Hash = %q, %v", h, err)
			}
		})
	}
}

// TestHashDoesNotBlock checks that hashing a configuration with a FIFO in
// it returns (it hashes the error), and differs from one without it.
func TestHashDoesNotBlock(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "lbd.toml")
	mkdir(t, filepath.Join(dir, "conf.d"))
	if err := os.WriteFile(main, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := Hash(main)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "conf.d", "x.toml"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 1)
	go func() {
		h, _ := Hash(main)
		done <- h
	}()
	select {
	case after := <-done:
		if after == before {
			t.Errorf("the FIFO did not change the hash")
		}
	case <-time.After(patience):
		t.Fatal("Hash blocked on a FIFO")
	}
}

// TestLogRejectedIsBounded checks that one rejection logs at most
// maxLoggedProblems problems, then how many more there are.
func TestLogRejectedIsBounded(t *testing.T) {
	var buf bytes.Buffer
	l := &loop{Source: &Source{log: slog.New(slog.NewTextHandler(&buf, nil))}}
	var list config.ErrorList
	for i := range 250 {
		list = append(list, &config.Error{Pos: config.Pos{File: "lbd.toml", Line: i + 1}, Key: fmt.Sprint("k", i), Msg: "unknown key"})
	}
	l.logRejected("0123456789abcdef", fmt.Errorf("wrapped: %w", list))
	if n := strings.Count(buf.String(), `msg="configuration problem"`); n != maxLoggedProblems {
		t.Errorf("%d problems logged; want %d", n, maxLoggedProblems)
	}
	if !strings.Contains(buf.String(), "count=150") {
		t.Errorf("no count of the rest:\n%s", buf.String())
	}
}
