package logbridge

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestWithPriority(t *testing.T) {
	var out bytes.Buffer
	h := WithPriority(&out, func(w io.Writer) slog.Handler {
		return slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})
	})
	log := slog.New(h).With("source", "test").WithGroup("g")
	log.Error("broken", "k", 1)
	log.Warn("odd")
	log.Info("fine")
	log.Debug("detail")
	tests := []struct{ prefix, msg string }{
		{"<3>", "msg=broken"}, {"<4>", "msg=odd"}, {"<6>", "msg=fine"}, {"<7>", "msg=detail"},
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(tests) {
		t.Fatalf("lines:\n%s", out.String())
	}
	for i, tt := range tests {
		if !strings.HasPrefix(lines[i], tt.prefix+"time=") || !strings.Contains(lines[i], tt.msg) || !strings.Contains(lines[i], "source=test") {
			t.Errorf("line %d = %q; want %s... %s with the logger's attributes", i, lines[i], tt.prefix, tt.msg)
		}
	}
	if !strings.Contains(lines[0], "g.k=1") {
		t.Errorf("the group is lost: %q", lines[0])
	}
}

func TestUnderJournal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "stream")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		env  string
		want bool
	}{
		{"", false},
		{"1:2", false},
		{strings.Join([]string{itoa(st.Dev), itoa(st.Ino)}, ":"), true},
	}
	for _, tt := range tests {
		t.Setenv("JOURNAL_STREAM", tt.env)
		if got := UnderJournal(f); got != tt.want {
			t.Errorf("JOURNAL_STREAM=%q: %v; want %v", tt.env, got, tt.want)
		}
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
