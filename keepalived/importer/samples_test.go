package importer

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

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/keepalived/conf"
)

// TestDebianSamples imports every keepalived.conf.* of Debian's samples
// (LBD_KEEPALIVED_SAMPLES; see keepalived/conf's test of the same name
// for how to get them): none may fail, every output must validate, and
// the counts of complete and partial imports are logged.
func TestDebianSamples(t *testing.T) {
	dir := os.Getenv("LBD_KEEPALIVED_SAMPLES")
	if dir == "" {
		t.Skip("set LBD_KEEPALIVED_SAMPLES to Debian's keepalived samples (/usr/share/doc/keepalived/samples)")
	}
	var total, complete, parseErrors int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), "keepalived.conf") {
			return err
		}
		total++
		cfg, err := parseSample(t, path)
		if err != nil {
			parseErrors++
			t.Logf("%s: not imported, the parser refuses it: %v", d.Name(), err)
			return nil
		}
		res, err := Import(cfg, Options{})
		if err != nil {
			t.Errorf("%s: %v", d.Name(), err)
			return nil
		}
		if _, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(res.TOML())}); err != nil {
			t.Errorf("%s: output does not validate: %v", d.Name(), err)
		}
		if res.Report.Complete() {
			complete++
		}
		t.Logf("%s: %d services, %d not mapped, %d ignored, %d differ, %d not needed", d.Name(), len(res.Services),
			res.Report.Count(NotMapped), res.Report.Count(Ignored), res.Report.Count(Differs), res.Report.Count(Unneeded))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total == 0 {
		t.Fatalf("no keepalived.conf.* in %s", dir)
	}
	t.Logf("%d samples: %d complete, %d partial, %d refused by the parser", total, complete, total-complete-parseErrors, parseErrors)
}

func parseSample(t *testing.T, path string) (*conf.Config, error) {
	opts := conf.Options{ConfigID: "lbd-test"}
	if !strings.HasSuffix(path, ".gz") {
		return conf.Parse(path, opts)
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
	opts.FS = conf.MapFS(fstest.MapFS{name: {Data: b.Bytes(), Mode: 0o644}})
	return conf.Parse("/"+name, opts)
}
