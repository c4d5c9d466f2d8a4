package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestImportKeepalived(t *testing.T) {
	tests := []struct {
		name   string
		conf   string
		out    bool // -o DIR
		code   int
		stdout string
		stderr string
	}{
		{"complete", "virtual_server 192.0.2.1 80 {\n real_server 10.0.0.1 80 {\n  TCP_CHECK {\n  }\n }\n}\n", false, 0, `name = "vs-192.0.2.1-80-tcp"`, ""},
		{"incomplete", "virtual_server 192.0.2.1 80 {\n lb_algo lblc\n}\n", false, exitIncomplete, "[[service]]", "keepalived.conf:2: lb_algo lblc: not mapped: "},
		{"parse error", "virtual_server 192.0.2.1 80 {\n", false, 1, "", "error:"},
		{"to a directory", "global_defs {\n lvs_timeouts tcp 60\n}\nvirtual_server 192.0.2.1 80 {\n}\n", true, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "keepalived.conf")
			if err := os.WriteFile(path, []byte(tt.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"import", "keepalived", path, "--config-id", "test"}
			outDir := filepath.Join(dir, "out")
			if tt.out {
				args = append(args, "-o", outDir)
			}
			var stdout, stderr bytes.Buffer
			root := newRootCommand(&stdout, &stderr)
			root.SetArgs(args)
			code := 0
			if err := root.Execute(); err != nil {
				code = exitCode(err)
			}
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stdout:\n%s\nstderr:\n%s\nwant %q and %q", stdout.String(), stderr.String(), tt.stdout, tt.stderr)
			}
			if tt.out {
				main, err := os.ReadFile(filepath.Join(outDir, "lbd.toml"))
				if err != nil || !strings.Contains(string(main), "[ipvs]") {
					t.Errorf("lbd.toml: %q, %v", main, err)
				}
				if _, err := load(filepath.Join(outDir, "lbd.toml")); err != nil {
					t.Errorf("written configuration does not load: %v", err)
				}
				if _, err := os.Stat(filepath.Join(outDir, "conf.d", "vs-192.0.2.1-80-tcp.toml")); err != nil {
					t.Error(err)
				}
			}
		})
	}
}
