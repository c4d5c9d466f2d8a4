package daemon

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
)

func TestReportingLoad(t *testing.T) {
	good := &config.Config{}
	tests := []struct {
		name    string
		load    func(string) (*config.Config, error)
		wantErr string
	}{
		{"valid", func(string) (*config.Config, error) { return good, nil }, ""},
		{"invalid", func(string) (*config.Config, error) { return nil, errors.New("lbd.toml:3: bad") }, "lbd.toml:3: bad"},
		{"panic", func(string) (*config.Config, error) { panic("index out of range") }, "internal error while reading the configuration (a bug in lbd, please report it): index out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rejects := make(chan error, 1)
			rejects <- errors.New("an older, unread refusal")
			load := reportingLoad(slog.New(slog.NewTextHandler(io.Discard, nil)), rejects, tt.load)
			cfg, err := load("lbd.toml")
			if tt.wantErr == "" {
				if err != nil || cfg != good {
					t.Fatalf("load = %v, %v; want the configuration", cfg, err)
				}
				if len(rejects) != 1 {
					t.Errorf("a valid load touched the rejects")
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr || cfg != nil {
				t.Fatalf("load = %v, %v; want error %q", cfg, err, tt.wantErr)
			}
			select {
			case got := <-rejects:
				if got.Error() != tt.wantErr {
					t.Errorf("reported %q; want the latest refusal %q", got, tt.wantErr)
				}
			default:
				t.Error("the refusal was not reported")
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		err  string
		want string
	}{
		{"lbd.toml:3: bad", "lbd.toml:3: bad"},
		{"lbd.toml:3: bad\nconf.d/a.toml:1: worse\nconf.d/b.toml:9: worst", "lbd.toml:3: bad (and 2 more lines: lbd status)"},
		{strings.Repeat("x", 5000), strings.Repeat("x", 200) + "…"},
	}
	for _, tt := range tests {
		if got := summary(errors.New(tt.err)); got != tt.want {
			t.Errorf("summary(%.20q) = %q; want %q", tt.err, got, tt.want)
		}
	}
}

// An invalid configuration at start makes lbd ready, saying what is
// wrong, instead of failing the start into a restart loop; a refusal
// stays in the status line until a configuration is taken into force.
func TestNotifierRefusals(t *testing.T) {
	read := notifySocket(t)
	n := &notifier{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	n.setRejected("lbd.toml:3: bad")
	n.invalidAtStart()
	n.onSync(dataplane.SyncResult{Services: 1, Start: time.Now()})
	n.setRejected("")
	n.onSync(dataplane.SyncResult{Services: 1, Start: time.Now()})
	n.setRejected("conf.d/a.toml:1: worse")
	n.refused()
	got := read(200 * time.Millisecond)
	want := []string{
		"READY=1",
		"STATUS=invalid configuration, nothing applied: lbd.toml:3: bad",
		"STATUS=1 virtual servers",
		"STATUS=1 virtual servers",
		"STATUS=configuration refused, the last good one stays in force: conf.d/a.toml:1: worse",
	}
	if len(got) != len(want) {
		t.Fatalf("messages %q; want %d like %q", got, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("message %d = %q; want prefix %q", i, got[i], w)
		}
	}
	if !strings.HasSuffix(got[2], "; configuration refused: lbd.toml:3: bad") {
		t.Errorf("a sync while a refusal stands hides it: %q", got[2])
	}
	if strings.Contains(got[3], "refused") {
		t.Errorf("a refusal outlives the configuration taken into force: %q", got[3])
	}
}
