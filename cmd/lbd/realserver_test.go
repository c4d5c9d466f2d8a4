package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Flag mistakes are usage errors (exit 2) that name the flag, and nothing
// reaches the kernel.
func TestRealServerUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no method", []string{"check", "--vip", "198.18.100.1"}, `--method "": expected dr or tun`},
		{"nat", []string{"setup", "--method", "nat", "--vip", "198.18.100.1"}, `--method "nat": expected dr or tun`},
		{"tunnel options with dr", []string{"setup", "--method", "dr", "--tunnel", "gre", "--vip", "198.18.100.1"}, "--tunnel is for --method tun only"},
		{"unknown tunnel", []string{"check", "--method", "tun", "--tunnel", "vxlan", "--vip", "198.18.100.1"}, `--tunnel "vxlan": expected ipip, gue or gre`},
		{"not an address", []string{"undo", "--method", "dr", "--vip", "198.18.100.300"}, `--vip "198.18.100.300": expected an IPv4 or IPv6 address`},
		{"no VIP", []string{"setup", "--method", "tun"}, "no VIP: expected at least one --vip"},
		{"GUE on port 0", []string{"setup", "--method", "tun", "--tunnel", "gue", "--gue-port", "0", "--vip", "198.18.100.1"}, "gue needs the UDP port"},
		{"check has no record", []string{"check", "--method", "dr", "--vip", "198.18.100.1", "--record", "/tmp/x"}, "unknown flag: --record"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			cmd := newRootCommand(&out, &errOut)
			cmd.SetArgs(append([]string{"realserver"}, tt.args...))
			err := cmd.Execute()
			if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v (exit %d), want exit 2 with %q", err, exitCode(err), tt.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
}

// The manual page lists the commands with their options.
func TestRealServerInManPage(t *testing.T) {
	dir := t.TempDir()
	cmd := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	cmd.SetArgs([]string{"man", dir})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "lbd.8"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`.SS "lbd realserver setup"`, `.SS "lbd realserver check"`, `.SS "lbd realserver undo"`, `\-\-gue\-port`, "arp_announce"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("lbd.8 lacks %s", want)
		}
	}
}
