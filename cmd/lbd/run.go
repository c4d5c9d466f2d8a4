package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/daemon"
	"github.com/lbdproject/lbd/internal/logbridge"
)

func newRunCommand() *cobra.Command {
	var path, stateDir, logFormat, logLevel string
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Long: `Run the lbd daemon in the foreground (systemd runs it this way).

lbd programs IPVS virtual servers and binds their VIPs to its dummy
interface from the configuration, re-syncing at a bounded rate: changes are
applied as diffs within min_sync_period, and every sync_period a full
reconcile repairs drift (for example after ipvsadm -C).

The configuration is watched: a valid edit of the main file or of a conf.d
file takes effect within a second; an invalid edit is rejected as a whole,
logged with its errors, and the last good configuration stays in force.
SIGHUP re-reads the configuration at once. SIGTERM and SIGINT stop the
daemon and leave the dataplane in place, so traffic keeps flowing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log, err := newLogger(c.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			logbridge.Standard(log)
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			return daemon.Run(ctx, daemon.Options{ConfigPath: path, StateDir: stateDir, Logger: log, Version: buildVersion(), Reload: hup})
		},
	}
	c.Flags().StringVarP(&path, "config", "c", config.DefaultPath, "main configuration file (conf.d/*.toml beside it is merged)")
	c.Flags().StringVar(&stateDir, "state-dir", daemon.DefaultStateDir, "directory for runtime state (which IPVS services lbd owns); keep it across restarts")
	c.Flags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return c
}
