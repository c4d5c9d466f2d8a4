package logbridge

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestLogrusGoesToSlogAtDebug(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level
		want  bool
	}{
		{"shown at debug", slog.LevelDebug, true},
		{"hidden at info", slog.LevelInfo, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var own, out bytes.Buffer
			l := logrus.New()
			l.SetOutput(&own)
			Logrus(l, slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: tt.level})))
			l.WithField("module", "ip_vs").Warnf("Running modprobe ip_vs failed with message: `%s`", "not found")
			l.Error("Could not get ipvs family information")
			if own.Len() != 0 {
				t.Errorf("logrus still wrote to its own output: %q", own.String())
			}
			got := out.String()
			if !tt.want {
				if got != "" {
					t.Errorf("logged above debug: %q", got)
				}
				return
			}
			for _, w := range []string{"level=DEBUG", "modprobe ip_vs failed", "library_level=warning", "module=ip_vs", "library_level=error"} {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
