package sysctl

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnsure(t *testing.T) {
	root := t.TempDir()
	write := func(key, v string) {
		p := filepath.Join(root, key)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("net/ipv4/ip_forward", "0")
	write("net/ipv4/vs/conntrack", "1")
	settings := []Setting{
		{"net/ipv4/ip_forward", "1", "a"},
		{"net/ipv4/vs/conntrack", "1", "b"},
		{"net/ipv4/vs/missing", "1", "c"},
	}
	err := Ensure(root, settings, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "net.ipv4.vs.missing") || strings.Contains(err.Error(), "ip_forward") {
		t.Errorf("err = %v; want only the missing key reported", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "net/ipv4/ip_forward")); string(b) != "1" {
		t.Errorf("ip_forward = %q; want it set to 1", b)
	}
}

func TestKeepRouterAdvertisements(t *testing.T) {
	root := t.TempDir()
	for iface, v := range map[string]string{"eth0": "1", "eth1": "0", "all": "1", "lo": "1"} {
		p := filepath.Join(root, "net/ipv6/conf", iface, "accept_ra")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := KeepRouterAdvertisements(root, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for iface, want := range map[string]string{"eth0": "2", "eth1": "0\n", "all": "1\n", "lo": "1\n"} {
		if b, _ := os.ReadFile(filepath.Join(root, "net/ipv6/conf", iface, "accept_ra")); string(b) != want {
			t.Errorf("%s: accept_ra = %q; want %q", iface, b, want)
		}
	}
}
