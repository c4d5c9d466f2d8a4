// Package logbridge routes what libraries log through logrus into lbd's
// slog logger. moby/ipvs warns through logrus whenever its own modprobe
// fails, which under the unit is always (ProtectKernelModules hides the
// module tree after ExecStartPre loaded ip_vs): at debug, so that an
// admin's first journal line is not a false alarm.
package logbridge

import (
	"context"
	"io"
	"log/slog"

	"github.com/sirupsen/logrus"
)

// Logrus sends everything logged through l to log at debug, with logrus's
// level as an attribute, and nothing to l's own output. l is usually
// logrus.StandardLogger(), which libraries log through.
func Logrus(l *logrus.Logger, log *slog.Logger) {
	l.SetOutput(io.Discard)
	l.SetLevel(logrus.DebugLevel)
	l.ReplaceHooks(logrus.LevelHooks{})
	l.AddHook(hook{log: log})
}

type hook struct{ log *slog.Logger }

func (hook) Levels() []logrus.Level { return logrus.AllLevels }

func (h hook) Fire(e *logrus.Entry) error {
	attrs := make([]slog.Attr, 0, len(e.Data)+2)
	attrs = append(attrs, slog.String("library_level", e.Level.String()), slog.String("via", "logrus"))
	for k, v := range e.Data {
		attrs = append(attrs, slog.Any(k, v))
	}
	h.log.LogAttrs(context.Background(), slog.LevelDebug, e.Message, attrs...)
	return nil
}

// Standard routes logrus's standard logger, the one libraries use.
func Standard(log *slog.Logger) { Logrus(logrus.StandardLogger(), log) }
