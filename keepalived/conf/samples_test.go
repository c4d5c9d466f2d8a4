package conf

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// TestDebianSamples reads every file of Debian's keepalived samples: each
// keepalived.conf.* must parse without error; other files (shell scripts)
// are read too, and what becomes of them is logged.
func TestDebianSamples(t *testing.T) {
	dir := os.Getenv("LBD_KEEPALIVED_SAMPLES")
	if dir == "" {
		t.Skip("set LBD_KEEPALIVED_SAMPLES to Debian's keepalived samples: /usr/share/doc/keepalived/samples " +
			"with the package installed, or: cd /tmp && apt-get download keepalived && dpkg-deb -x keepalived_*.deb kad; " +
			"LBD_KEEPALIVED_SAMPLES=/tmp/kad/usr/share/doc/keepalived/samples go test ./keepalived/conf/")
	}
	configs, clean := 0, 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		name := strings.TrimSuffix(d.Name(), ".gz")
		cfg, perr := parseSample(t, path)
		isConfig := strings.HasPrefix(name, "keepalived.conf")
		switch {
		case isConfig && perr != nil:
			t.Errorf("%s: %v", name, perr)
		case isConfig:
			clean++
		default:
			t.Logf("%s (not a keepalived configuration): %d top-level nodes, error: %v", name, len(cfg.Root.Children), perr)
		}
		if isConfig {
			configs++
			for _, w := range cfg.Warnings {
				t.Logf("%s: warning %v", name, w.Error())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if configs == 0 {
		t.Fatalf("no keepalived.conf.* in %s", dir)
	}
	t.Logf("%d of %d sample configurations parse without error", clean, configs)
}

// parseSample parses a sample file; a gzipped one is decompressed into
// memory first.
func parseSample(t *testing.T, path string) (*Config, error) {
	opts := Options{ConfigID: "lbd-test"}
	if !strings.HasSuffix(path, ".gz") {
		return Parse(path, opts)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(zr, 1<<20)); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	name := strings.TrimSuffix(filepath.Base(path), ".gz")
	opts.FS = MapFS(fstest.MapFS{name: {Data: b.Bytes(), Mode: 0o644}})
	return Parse("/"+name, opts)
}
