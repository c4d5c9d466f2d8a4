package conf

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Hostile input stops at lbd's bounds with an error at a line, and costs
// little on the way.
func TestLimits(t *testing.T) {
	deep := strings.Repeat("a {\n", 40)
	for _, tc := range []struct {
		name, text string
		lim        Limits
		line       int
	}{
		{"bytes read", strings.Repeat("x 1\n", 100), Limits{MaxBytes: 200}, 0},
		{"bytes made", "~SEQ(i, 1, 100000) x " + strings.Repeat("y", 500), Limits{MaxBytes: 100_000}, 1},
		{"a definition fed by a sequence", "~SEQ(i, 1, 100000) $M=" + strings.Repeat("y", 500) + `\`, Limits{MaxBytes: 100_000}, 1},
		{"lines", "~SEQ(i, 1, 1000000000)\nx 1", Limits{MaxLines: 1000}, 1},
		{"nested sequences", "~SEQ(a, 1, 1000) ~SEQ(b, 1, 1000) ~SEQ(c, 1, 1000) x", Limits{MaxLines: 10_000}, 1},
		{"block depth", deep, Limits{}, 33},
		{"brace patterns", "include " + strings.Repeat("{a,b}", 11), Limits{}, 1},
		{"include searches", strings.Repeat("include {a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}\n", 200), Limits{}, 98},
	} {
		cfg, err := parseFiles(t, map[string]string{"etc/keepalived/keepalived.conf": tc.text}, Options{Limits: tc.lim})
		var list ErrorList
		if !errors.As(err, &list) || list[len(list)-1].Kind != KindLimit || list[len(list)-1].Pos.Line != tc.line {
			t.Errorf("%s: %v; want a limit error at line %d", tc.name, err, tc.line)
		}
		if cfg == nil {
			t.Errorf("%s: no Config", tc.name)
		}
	}
}

// The default bounds, at their worst: figures, not assertions on time.
func TestDefaultLimitsCost(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("a quarter of a million lines: run without -short and -race for the figures")
	}
	var chain strings.Builder
	for i := range 9000 {
		fmt.Fprintf(&chain, "$A%d=$A%d\n", i, i+1)
	}
	for name, text := range map[string]string{
		"long chains of definitions": chain.String() + strings.Repeat("x ${A0}\n", 1000),
		"endless ~SEQ":               "~SEQ(i, 1, 9223372036854775807)",
		"endless ~SEQ with text":     "~SEQ(i, 1, 9223372036854775807) real_server 10.0.0.${i} 80",
		"parameter cycle":            "$A=$B\n$B=$A\n" + strings.Repeat("x $A\n", 10),
		"parameter growth":           "$A=$A$A\n" + strings.Repeat("x ${A}\n", 1000),
	} {
		start := time.Now()
		cfg, err := parseText(t, text)
		if err == nil && name != "parameter growth" {
			t.Errorf("%s: no error", name)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("%s: %d top-level nodes, %v, %d MiB heap, %v", name, len(cfg.Root.Children),
			time.Since(start).Round(time.Millisecond), ms.HeapAlloc>>20, firstLine(err))
		runtime.GC()
	}
}

func firstLine(err error) string {
	if err == nil {
		return "no error"
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// Problems beyond maxProblems are counted, not listed.
func TestProblemCap(t *testing.T) {
	cfg, err := parseText(t, strings.Repeat("}\n", 150)+strings.Repeat("a 1\x00\n", 150))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != maxProblems+1 || list[maxProblems].Kind != KindTooMany ||
		list[maxProblems].Pos.Line != maxProblems+1 || !strings.Contains(list[maxProblems].Msg, "50 more errors") {
		t.Errorf("errors: %d, last %v", len(list), list[len(list)-1])
	}
	if w := cfg.Warnings; len(w) != maxProblems+1 || w[maxProblems].Kind != KindTooMany || !strings.Contains(w[maxProblems].Msg, "50 more warnings") {
		t.Errorf("warnings: %d", len(w))
	}
}
