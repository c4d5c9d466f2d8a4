package iptables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLookupRunner(t *testing.T) {
	tests := []struct {
		name      string
		installed []string
		family    int
		save      string // "" when an error is wanted
		restore   string
		wantErr   string
	}{
		{"the backend's own tools", []string{"iptables-nft-save", "iptables-nft-restore", "iptables-save", "iptables-restore"}, 4,
			"iptables-nft-save", "iptables-nft-restore", ""},
		{"the backend's save without its restore: the plain pair", []string{"iptables-nft-save", "iptables-save", "iptables-restore"}, 4,
			"iptables-save", "iptables-restore", ""},
		{"ip6tables", []string{"ip6tables-nft-save", "ip6tables-nft-restore"}, 6,
			"ip6tables-nft-save", "ip6tables-nft-restore", ""},
		{"a save without any restore", []string{"iptables-nft-save", "iptables-save"}, 4,
			"", "", "iptables-save and iptables-restore not found in PATH (missing iptables-nft-restore, iptables-restore): install the iptables package"},
		{"nothing", nil, 6,
			"", "", "ip6tables-save and ip6tables-restore not found in PATH (missing ip6tables-nft-save, ip6tables-nft-restore, ip6tables-save, ip6tables-restore)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, bin := range tt.installed {
				if err := os.WriteFile(filepath.Join(dir, bin), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", dir)
			r, err := LookupRunner(tt.family, NFT)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("%v, %v; want the error %q", r, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.save != tt.save || r.restore != tt.restore || r.Tool() != map[int]string{4: "iptables", 6: "ip6tables"}[tt.family] {
				t.Errorf("save %s restore %s tool %s; want %s %s", r.save, r.restore, r.Tool(), tt.save, tt.restore)
			}
		})
	}
}
