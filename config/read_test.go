package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadWithin runs Load and fails if it does not return: a FIFO must never
// block it. The wait is a hang guard, not a latency bound.
func loadWithin(t *testing.T, path string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := Load(path)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("Load(%s) blocked", path)
		return nil
	}
}

// TestLoadReadsOnlyRegularFiles checks that a FIFO, a device or a huge
// file among the configuration files is refused, without blocking or
// reading it, and that the other files' problems are still reported.
func TestLoadReadsOnlyRegularFiles(t *testing.T) {
	tests := []struct {
		name string
		make func(t *testing.T, path string)
		want string
	}{
		{"fifo", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file (a FIFO); lbd reads only regular files"},
		{"symlink to /dev/zero", func(t *testing.T, p string) {
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file (a character device); lbd reads only regular files"},
		{"directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file (a directory); lbd reads only regular files"},
		{"larger than 16 MiB", func(t *testing.T, p string) {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, maxFileSize+1); err != nil { // sparse
				t.Fatal(err)
			}
		}, "larger than 16 MiB, the most lbd reads of such a file"},
	}
	for _, tt := range tests {
		for _, where := range []string{"conf.d/x.toml", "lbd.toml"} {
			if tt.name == "directory" && where != "lbd.toml" {
				continue // Files skips directories in conf.d
			}
			t.Run(tt.name+" as "+where, func(t *testing.T) {
				files := map[string]string{"lbd.toml": "[sync]\nburst = 0\n", "conf.d/a.toml": svc + "port = 1\n"}
				delete(files, where)
				path := writeConfig(t, files)
				tt.make(t, filepath.Join(filepath.Dir(path), where))
				err := loadWithin(t, path)
				list, ok := err.(ErrorList)
				if !ok {
					t.Fatalf("error %T %v; want an ErrorList", err, err)
				}
				var got []string
				for _, e := range list {
					got = append(got, strings.TrimPrefix(e.Error(), filepath.Dir(path)+"/"))
				}
				want := [][2]string{{where + ": ", tt.want}, {"conf.d/a.toml:6:1", "TOML syntax error"}}
				if where == "conf.d/x.toml" {
					want = append(want, [2]string{"lbd.toml:2:1", "0 is out of range"})
				}
				expectErrors(t, got, want)
			})
		}
	}
}

func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(fifo); err == nil || err.Error() != "read "+fifo+": not a regular file (a FIFO); lbd reads only regular files" {
		t.Errorf("ReadFile(fifo) = %v", err)
	}
	ok := filepath.Join(dir, "ok.toml")
	if err := os.WriteFile(ok, []byte(svc), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(ok); err != nil || string(b) != svc {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !os.IsNotExist(err) {
		t.Errorf("ReadFile(missing) = %v; want a not-exist error", err)
	}
}
