package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/file"
)

func newRunCommand() *cobra.Command {
	var path, logFormat, logLevel string
	c := &cobra.Command{
		Use:   "run",
		Short: "Run the daemon",
		Long: `Run the lbd daemon in the foreground (systemd runs it this way).

The configuration is watched: a valid edit of the main file or of a conf.d
file takes effect within a second; an invalid edit is rejected as a whole,
logged with its errors, and the last good configuration stays in force.
SIGHUP re-reads the configuration at once. SIGTERM and SIGINT stop the
daemon and leave the dataplane in place.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			log, err := newLogger(c.ErrOrStderr(), logFormat, logLevel)
			if err != nil {
				return err
			}
			src, err := file.New(file.Options{Path: path, Logger: log})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(c.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)

			log.Info("lbd starting", "version", buildVersion(), "config", path)
			errc := make(chan error, 1)
			go func() { errc <- src.Run(ctx) }()
			updates := src.Updates()
			for {
				select {
				case <-hup:
					log.Info("SIGHUP: re-reading configuration")
					src.Reload()
				case cfg, ok := <-updates:
					if !ok { // the source stopped; its error follows on errc
						updates = nil
						continue
					}
					// The dataplane consumes these snapshots once it lands;
					// until then the daemon validates and reports them.
					log.Info("configuration in force", "services", len(cfg.Services), "files", len(cfg.Files))
				case err := <-errc:
					if err != nil && !errors.Is(err, context.Canceled) {
						return err
					}
					log.Info("lbd stopped; the dataplane stays in place")
					return nil
				}
			}
		},
	}
	c.Flags().StringVarP(&path, "config", "c", config.DefaultPath, "main configuration file (conf.d/*.toml beside it is merged)")
	c.Flags().StringVar(&logFormat, "log-format", "text", "log format: text or json")
	c.Flags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return c
}
