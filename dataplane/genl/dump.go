package genl

import (
	"errors"
	"fmt"
)

// nlmFDumpIntr is NLM_F_DUMP_INTR: the kernel sets it on the messages of a
// dump during which the table changed, so the dump may have missed or
// repeated entries.
const nlmFDumpIntr = 0x10

// ErrDumpInterrupted is returned by a dump the kernel flagged with
// NLM_F_DUMP_INTR. It is a routine race with a concurrent change, not a
// failure: the dump is to be run again (RetryDump).
var ErrDumpInterrupted = errors.New("dump interrupted by a concurrent change (NLM_F_DUMP_INTR)")

// DumpInterrupted reports whether the kernel flagged m, a message of a
// dump's reply, with NLM_F_DUMP_INTR. A reader should read the reply to
// its end, then return ErrDumpInterrupted.
func (m Message) DumpInterrupted() bool { return m.Flags&nlmFDumpIntr != 0 }

// DumpAttempts is how many times RetryDump runs a dump that keeps being
// interrupted before it gives up: an interruption needs a change during
// the few milliseconds of a dump, so several in a row mean a table that
// keeps changing.
const DumpAttempts = 5

// RetryDump runs dump until it returns an error that is not interrupted
// (errors.Is(err, interrupted)), or nil, at most DumpAttempts times.
// interrupted is the sentinel the dump's library returns with the flag:
// ErrDumpInterrupted, or vishvananda/netlink's ErrDumpInterrupted. dump
// must start from scratch each time: the results of an interrupted run
// are to be thrown away.
func RetryDump(interrupted error, dump func() error) error {
	var err error
	for range DumpAttempts {
		if err = dump(); err == nil || !errors.Is(err, interrupted) {
			return err
		}
	}
	return fmt.Errorf("interrupted %d times in a row by concurrent changes: %w", DumpAttempts, err)
}
