package genl

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

func TestRetryDump(t *testing.T) {
	other := errors.New("netlink socket closed")
	tests := []struct {
		name        string
		interrupts  int   // the first runs interrupted
		then        error // what the next run returns
		wantRuns    int
		wantErr     error  // errors.Is the returned error
		wantMessage string // in the returned error
	}{
		{"not interrupted", 0, nil, 1, nil, ""},
		{"interrupted once", 1, nil, 2, nil, ""},
		{"interrupted all but the last attempt", DumpAttempts - 1, nil, DumpAttempts, nil, ""},
		{"interrupted every time", DumpAttempts, nil, DumpAttempts, ErrDumpInterrupted, "interrupted 5 times in a row"},
		{"another error is not retried", 0, other, 1, other, "socket closed"},
		{"another error after an interruption", 2, other, 3, other, "socket closed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			err := RetryDump(ErrDumpInterrupted, func() error {
				runs++
				if runs <= tt.interrupts {
					return ErrDumpInterrupted
				}
				return tt.then
			})
			if runs != tt.wantRuns {
				t.Errorf("%d runs, want %d", runs, tt.wantRuns)
			}
			if (err == nil) != (tt.wantErr == nil) || tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if tt.wantMessage != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMessage)) {
				t.Errorf("error %v, want it to say %q", err, tt.wantMessage)
			}
		})
	}
}

func TestRetryDumpOtherSentinel(t *testing.T) {
	// vishvananda/netlink returns its own sentinel, wrapped by callers.
	theirs := syscall.EINTR
	runs := 0
	err := RetryDump(theirs, func() error {
		runs++
		if runs < 3 {
			return errors.Join(errors.New("listing addresses"), theirs)
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Errorf("%d runs, %v; want 3 runs and no error", runs, err)
	}
}

func TestDumpInterruptedFlag(t *testing.T) {
	for _, tc := range []struct {
		flags uint16
		want  bool
	}{{0, false}, {0x2 /* NLM_F_MULTI */, false}, {0x2 | 0x10, true}} {
		m := errorAnswer(1, 0)
		native.PutUint16(m[6:], tc.flags)
		for msg := range Messages(m) {
			if got := msg.DumpInterrupted(); got != tc.want {
				t.Errorf("flags %#x: DumpInterrupted %v, want %v", tc.flags, got, tc.want)
			}
		}
	}
}
