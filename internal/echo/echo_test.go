package echo

import (
	"fmt"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	long := strings.Repeat("a", Max-1) + "é" + "tail"
	tests := []struct {
		name, format string
		in           string
		want         string
	}{
		{"short as is", "%s", "web", "web"},
		{"short quoted", "%q", "we\"b", `"we\"b"`},
		{"long cut at a character boundary", "%s", long, strings.Repeat("a", Max-1) + fmt.Sprintf("…(%d bytes)", len(long))},
		{"long quoted", "%q", strings.Repeat("b", Max+5), `"` + strings.Repeat("b", Max) + `"…(85 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fmt.Sprintf(tt.format, String(tt.in)); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
	args := Args([]any{"short", strings.Repeat("c", Max+1), 7})
	if _, ok := args[1].(String); !ok {
		t.Errorf("Args left a long string as %T", args[1])
	}
	if _, ok := args[0].(string); !ok || args[2] != 7 {
		t.Errorf("Args changed %v", args)
	}
}
