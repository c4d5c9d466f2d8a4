package healthcheck

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
)

// probeTestLog keeps the records logged through it.
type probeTestLog struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *probeTestLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *probeTestLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

func (l *probeTestLog) WithAttrs([]slog.Attr) slog.Handler { return l }

func (l *probeTestLog) WithGroup(string) slog.Handler { return l }

// panics returns the records of panics logged, as their attributes.
func (l *probeTestLog) panics() []map[string]slog.Value {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]slog.Value
	for _, r := range l.recs {
		if r.Message != "health check panicked" {
			continue
		}
		attrs := map[string]slog.Value{"level": slog.StringValue(r.Level.String())}
		r.Attrs(func(a slog.Attr) bool {
			attrs[a.Key] = a.Value
			return true
		})
		out = append(out, attrs)
	}
	return out
}

// probeTestIndex panics as decoding a short answer would.
func probeTestIndex(answer []byte, i int) byte { return answer[i] }

// TestCheckPanicFailsTheCheck: a checker that panics fails its check with
// a message that says so, the daemon goes on, and the panic is logged with
// its stack once per panicLogEvery, however often it recurs.
func TestCheckPanicFailsTheCheck(t *testing.T) {
	tests := []struct {
		name   string
		check  func() error
		want   string // LastError, exactly
		panics bool
	}{
		{name: "index out of range", panics: true, check: func() error { probeTestIndex([]byte("abc"), 5); return nil },
			want: "internal error in the tcp check while reading the answer: runtime error: index out of range [5] with length 3"},
		{name: "long panic value", panics: true, check: func() error { panic("answer " + strings.Repeat("\x1b", 10000)) },
			want: "internal error in the tcp check while reading the answer: answer " + strings.Repeat(`\x1b`, (outsideMax-len("answer "))/4) + "…(10007 bytes)"},
		{name: "error panic value", panics: true, check: func() error { panic(errors.New("bad answer")) },
			want: "internal error in the tcp check while reading the answer: bad answer"},
		{name: "long error", check: func() error { return errors.New(strings.Repeat("é", 3000)) },
			want: strings.Repeat("é", resultMax/2) + "…(6000 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { probeTestPanics(t, tt.check, tt.want, tt.panics) })
		})
	}
}

func probeTestPanics(t *testing.T, check func() error, want string, panics bool) {
	log := &probeTestLog{}
	m := New(Options{
		Logger: slog.New(log),
		NewChecker: func(config.HealthCheck) (Checker, error) {
			return checkerFunc(func(context.Context, Target) error { return check() }), nil
		},
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	hc := tcpCheck(true)
	hc.Fall = 1
	m.Set([]Probe{{"web", rs1, hc}}, nil)

	time.Sleep(10 * time.Second) // ten checks
	synctest.Wait()
	st := m.Status()
	if len(st) != 1 || st[0].Healthy || st[0].LastError != want {
		t.Fatalf("status %+v; want unhealthy with LastError %q", st, want)
	}
	logged := log.panics()
	if !panics {
		if len(logged) != 0 {
			t.Errorf("%d panics logged; want none", len(logged))
		}
		return
	}
	if len(logged) != 1 {
		t.Fatalf("%d panics logged in 10 checks; want 1", len(logged))
	}
	p := logged[0]
	if p["level"].String() != "ERROR" || p["target"].String() != rs1.String() || p["check"].String() != "tcp" ||
		!strings.Contains(want, p["panic"].String()) || !strings.Contains(p["stack"].String(), "probeTest") {
		t.Errorf("logged %v; want an error with target, check, panic and the stack of the panic", p)
	}

	time.Sleep(panicLogEvery) // the next one is logged, with the count of those that were not
	synctest.Wait()
	logged = log.panics()
	if len(logged) != 2 {
		t.Fatalf("%d panics logged after %s; want 2", len(logged), panicLogEvery)
	}
	// Checks each second: all but the last of an hour's went unlogged.
	if n, want := logged[1]["unlogged_since_last"].Int64(), int64(panicLogEvery/hc.Interval)-1; n != want {
		t.Errorf("second log counts %d unlogged panics; want %d", n, want)
	}
}
