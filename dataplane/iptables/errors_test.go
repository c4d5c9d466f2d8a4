package iptables

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRestoreError(t *testing.T) {
	input := "*filter\n:LBD-A - [0:0]\n-A LBD-A -j ACCEPT\n-A LBD-A -m set --match-set NOSUCH src -j ACCEPT\n" +
		"-A LBD-A -m comment --comment " + strings.Repeat("x", 500) + " -j DROP\nCOMMIT\n"
	exit := errors.New("exit status 2")
	tests := []struct {
		name, stderr string
		line         int
		text         string // prefix of the quoted line
		msg          string // in the message
	}{
		{"parse error (nft)",
			"iptables-nft-restore v1.8.9 (nf_tables): Set NOSUCH doesn't exist.\n\nError occurred at line: 4\nTry `iptables-nft-restore -h' or 'iptables-nft-restore --help' for more information.\n",
			4, "-A LBD-A -m set --match-set NOSUCH src -j ACCEPT", "Set NOSUCH doesn't exist.; Error occurred at line: 4"},
		{"kernel refusal (legacy)", "iptables-restore: line 3 failed\n", 3, "-A LBD-A -j ACCEPT", "iptables-restore: line 3 failed"},
		{"kernel refusal (nft)", "iptables-nft-restore: line 3 failed: No chain/target/match by that name.\n", 3, "-A LBD-A -j ACCEPT", "No chain/target/match"},
		{"kernel refusal at commit (nft)", "iptables-nft-restore v1.8.9 (nf_tables): \nline 4: RULE_APPEND failed (Invalid argument): rule in chain LBD-A\n", 4,
			"-A LBD-A -m set", "(nf_tables):; line 4: RULE_APPEND failed"},
		{"kernel refusal at commit (legacy)", "iptables-restore: line 6 failed\n", 6, "COMMIT (the kernel refused one of the table's rules", "line 6 failed"},
		{"a long line is cut", "iptables-restore: line 5 failed\n", 5, "-A LBD-A -m comment --comment xxx", "line 5 failed"},
		{"no line named", "iptables-restore: another app is currently holding the xtables lock\n", 0, "", "xtables lock"},
		{"a line beyond the input", "iptables-restore: line 99 failed\n", 0, "", "line 99 failed"},
		{"a long message is cut", strings.Repeat("blah ", 200), 0, "", "blah blah"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newRestoreError("iptables-restore", input, tt.stderr, exit)
			if e.Line != tt.line || !strings.HasPrefix(e.Text, tt.text) {
				t.Errorf("line %d %q; want %d %q", e.Line, e.Text, tt.line, tt.text)
			}
			msg := e.Error()
			if !strings.Contains(msg, tt.msg) || strings.Contains(msg, "Try `") || strings.Contains(msg, "\n") {
				t.Errorf("message %q; want one line with %q", msg, tt.msg)
			}
			if len(msg) > 40+maxMessage+maxLineText+40 {
				t.Errorf("message of %d bytes", len(msg))
			}
			if !errors.Is(e, exit) {
				t.Error("the exit status is not wrapped")
			}
			if tt.line > 0 && !strings.Contains(msg, fmt.Sprintf("[input line %d: %s", tt.line, tt.text)) {
				t.Errorf("message %q does not quote the line", msg)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc… (3 bytes more)"},
		{"aé", 2, "a… (2 bytes more)"}, // not in the middle of é
	} {
		if got := truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
