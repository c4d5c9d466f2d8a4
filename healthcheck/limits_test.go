package healthcheck

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestOutsideText(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", outsideMax) // two bytes each
	tests := []struct {
		in   string
		cut  bool
		want string
	}{
		{in: "", want: ""},
		{in: "plain text", want: "plain text"},
		{in: strings.Repeat("x", outsideMax), want: strings.Repeat("x", outsideMax)},
		{in: strings.Repeat("x", outsideMax+1), want: strings.Repeat("x", outsideMax) + "…(201 bytes)"},
		{in: long, want: long[:outsideMax] + "…(400 bytes)"},
		{in: "x" + long, want: "x" + long[:outsideMax-2] + "…(401 bytes)"}, // not cut inside "é"
		{in: "tab\tnewline\nescape\x1b[0m del\x7f", want: `tab\tnewline\nescape\x1b[0m del\x7f`},
		{in: "bad \xff byte", want: `bad \xff byte`},
		{in: "zero\u200bwidth, ok: ünïcödé", want: `zero\u200bwidth, ok: ünïcödé`},
		{in: strings.Repeat("\x00", 100), want: strings.Repeat(`\x00`, outsideMax/4) + "…(100 bytes)"},
		{in: "short", cut: true, want: "short…(5+ bytes)"},
	}
	for _, tt := range tests {
		if got := outsideCut(tt.in, tt.cut); got != tt.want {
			t.Errorf("outsideCut(%q, %t) = %q; want %q", tt.in, tt.cut, got, tt.want)
		}
	}
}

func TestOutsideWrap(t *testing.T) {
	t.Parallel()
	base := errors.New("x509: certificate is valid for " + strings.Repeat("a.example, ", 1000) + "not b.example")
	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "plain", err: syscall.ECONNRESET, want: "read: connection reset by peer"},
		{name: "long", err: base, want: "read: x509: certificate is valid for a.example, a.example, "},
		{name: "cap", err: &capError{what: "response headers", verb: "exceed", limit: httpMaxHead}, want: "read: response headers exceed 16 KiB"},
	}
	for _, tt := range tests {
		err := outsideWrap("read", tt.err)
		if !strings.HasPrefix(err.Error(), tt.want) || len(err.Error()) > len("read: ")+outsideMax+len("…(100000 bytes)") {
			t.Errorf("%s: outsideWrap = %q; want it to start with %q, cut", tt.name, err, tt.want)
		}
		if !errors.Is(err, tt.err) {
			t.Errorf("%s: %v does not wrap %v", tt.name, err, tt.err)
		}
	}
}

func TestCapSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]string{200: "200 bytes", 1024: "1 KiB", 16 << 10: "16 KiB", 1500: "1500 bytes"} {
		if got := capSize(n); got != want {
			t.Errorf("capSize(%d) = %q; want %q", n, got, want)
		}
	}
}
