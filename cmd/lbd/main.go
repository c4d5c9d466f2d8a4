// Command lbd is an LVS-style layer-4 load balancer daemon and its tools.
//
// This package only wires flags to the packages that do the work.
package main

import (
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/internal/logbridge"
)

// version is set at build time with -ldflags "-X main.version=1.2.3".
var version = ""

func main() {
	if err := newRootCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "lbd: %v\n", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries a specific exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return 1
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "lbd",
		Short: "LVS-style layer-4 load balancer (IPVS NAT) for Linux edge boxes",
		Long: `lbd programs the kernel's IPVS load balancer, ipsets and iptables from
virtual services and real servers described in TOML files
(` + config.DefaultPath + ` and ` + config.DefaultConfDir + `/*.toml beside it),
health-checks the real servers and keeps the kernel in step with the
configuration, re-syncing at a bounded rate and repairing drift.

Stopping lbd leaves the dataplane in place, so traffic keeps flowing while it
restarts or is upgraded.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(
		newRunCommand(),
		newCheckConfigCommand(),
		newPlanCommand(),
		newStatusCommand(),
		newCleanupCommand(),
		newRealServerCommand(),
		newImportCommand(),
		newVersionCommand(),
		newManCommand(),
	)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &exitError{code: 2, err: fmt.Errorf("%w\nRun '%s --help' for usage", err, c.CommandPath())}
	})
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print lbd's version",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), "lbd", buildVersion())
			return nil
		},
	}
}

// buildVersion is the linked-in version, else the module version or VCS
// revision recorded by the Go toolchain.
func buildVersion() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return "devel-" + s.Value[:12]
		}
	}
	return "devel"
}

// newLogger returns the slog logger the flags ask for, writing to w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, &exitError{code: 2, err: fmt.Errorf("--log-level %q: expected debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	var newHandler func(io.Writer) slog.Handler
	switch format {
	case "text":
		newHandler = func(w io.Writer) slog.Handler { return slog.NewTextHandler(w, opts) }
	case "json":
		newHandler = func(w io.Writer) slog.Handler { return slog.NewJSONHandler(w, opts) }
	default:
		return nil, &exitError{code: 2, err: fmt.Errorf("--log-format %q: expected text or json", format)}
	}
	h := newHandler(w)
	if f, ok := w.(*os.File); ok && logbridge.UnderJournal(f) {
		h = logbridge.WithPriority(w, newHandler) // journalctl -p sees the levels
	}
	l := slog.New(h)
	// Libraries that log through the standard log package (netlink notes
	// ipset attributes it does not know on every dump) go to debug.
	log.SetFlags(0)
	log.SetOutput(debugWriter{l})
	return l, nil
}

// debugWriter turns standard-library log lines into slog debug records.
type debugWriter struct{ l *slog.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.l.Debug("library", "msg", strings.TrimSpace(string(p)))
	return len(p), nil
}
