package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "lbd.toml")
	if err := os.WriteFile(bad, []byte("[[service]]\nname = \"x\"\nvips = [\"192.0.2.1\"]\nport = 99999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		code     int
		stdout   string
		errorMsg string
	}{
		{"valid example", []string{"check-config", "../../examples/lbd.toml"}, 0, "configuration is valid: 3 services, 6 static real servers, from 2 files", ""},
		{"failover pair, box A", []string{"check-config", "../../examples/pair/lbd-a.toml"}, 0, "configuration is valid: 3 services", ""},
		{"failover pair, box B", []string{"check-config", "../../examples/pair/lbd-b.toml"}, 0, "configuration is valid: 3 services", ""},
		{"invalid file", []string{"check-config", bad}, 1, "", bad + ":4:1: service[0].port: 99999 is out of range"},
		{"missing file", []string{"check-config", bad + ".missing"}, 1, "", "no such file or directory"},
		{"too many args", []string{"check-config", "a", "b"}, 1, "", "accepts at most 1 arg"},
		{"unknown flag", []string{"run", "--frobnicate"}, 2, "", "unknown flag: --frobnicate"},
		{"bad log format", []string{"run", "--log-format", "xml", "-c", bad}, 2, "", `--log-format "xml": expected text or json`},
		{"version", []string{"version"}, 0, "lbd ", ""},
		{"plan", []string{"plan", "../../examples/lbd.toml"}, 0, "-A -t 192.0.2.10:80 -s wrr\n-a -t 192.0.2.10:80 -r 10.10.0.11:8080 -m -w 3\n", ""},
		{"status without a daemon", []string{"status", "--socket", bad + ".sock"}, 3, "", "lbd is not running"},
		{"status with a bad output format", []string{"status", "-o", "yaml"}, 2, "", `-o "yaml": expected text or json`},
		{"plan of an invalid file", []string{"plan", bad}, 1, "", "99999 is out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := newRootCommand(&out, &errOut)
			cmd.SetArgs(tt.args)
			err := cmd.Execute()
			code := 0
			if err != nil {
				code = exitCode(err)
			}
			if code != tt.code {
				t.Errorf("exit code %d, want %d (err: %v)", code, tt.code, err)
			}
			if !strings.Contains(out.String(), tt.stdout) {
				t.Errorf("stdout %q does not contain %q", out.String(), tt.stdout)
			}
			if tt.errorMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.errorMsg)) {
				t.Errorf("error %v does not contain %q", err, tt.errorMsg)
			}
		})
	}
}
