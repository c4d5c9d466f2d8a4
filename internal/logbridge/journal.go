package logbridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
)

// Under systemd, stderr is a stream into the journal, which stores every
// line at priority info unless it starts with a syslog priority prefix
// ("<3>"; the unit's SyslogLevelPrefix= is on by default). Without the
// prefix, `journalctl -p warning` would never show lbd's warnings and
// errors.

// UnderJournal reports whether stderr is connected to the journal: systemd
// sets JOURNAL_STREAM to the device and inode of the stream it connected.
func UnderJournal(stderr *os.File) bool {
	want := os.Getenv("JOURNAL_STREAM")
	if want == "" {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(stderr.Fd()), &st); err != nil {
		return false
	}
	return want == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// WithPriority returns a handler that writes each record through the
// handler newHandler makes, prefixed with the record level's syslog
// priority: error 3, warning 4, info 6, debug 7.
func WithPriority(w io.Writer, newHandler func(io.Writer) slog.Handler) slog.Handler {
	var h priorityHandler
	for i, p := range priorities {
		h.by[i] = newHandler(prefixWriter{w: w, prefix: []byte(p.prefix)})
	}
	return h
}

var priorities = [...]struct {
	min    slog.Level
	prefix string
}{{slog.LevelError, "<3>"}, {slog.LevelWarn, "<4>"}, {slog.LevelInfo, "<6>"}, {slog.LevelDebug - 100, "<7>"}}

// priorityHandler routes each record to the handler of its priority.
type priorityHandler struct {
	by [len(priorities)]slog.Handler
}

func (h priorityHandler) pick(l slog.Level) slog.Handler {
	for i, p := range priorities {
		if l >= p.min {
			return h.by[i]
		}
	}
	return h.by[len(h.by)-1]
}

func (h priorityHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.pick(l).Enabled(ctx, l)
}

func (h priorityHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.pick(r.Level).Handle(ctx, r)
}

func (h priorityHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	for i := range h.by {
		h.by[i] = h.by[i].WithAttrs(attrs)
	}
	return h
}

func (h priorityHandler) WithGroup(name string) slog.Handler {
	for i := range h.by {
		h.by[i] = h.by[i].WithGroup(name)
	}
	return h
}

// prefixWriter writes prefix before each write: slog's handlers write one
// record per call.
type prefixWriter struct {
	w      io.Writer
	prefix []byte
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := p.w.Write(append(p.prefix[:len(p.prefix):len(p.prefix)], b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
