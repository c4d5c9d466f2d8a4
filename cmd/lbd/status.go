package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/status"
)

func newStatusCommand() *cobra.Command {
	var path, socket, output string
	c := &cobra.Command{
		Use:   "status",
		Short: "Show what the running daemon is doing",
		Long: `Show the running daemon's configuration, last sync, and every virtual server
with its real servers: configured weight, desired weight (after health and
quorum), the weight in the kernel, and where each comes from. Talks to the
daemon over its root-only unix socket ([status] socket in the configuration).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return &exitError{code: 2, err: fmt.Errorf("-o %q: expected text or json", output)}
			}
			if socket == "" {
				socket = config.Defaults().Status.Socket
				if cfg, err := config.Load(path); err == nil {
					socket = cfg.Status.Socket
				}
			}
			ctx, cancel := context.WithTimeout(c.Context(), 10*time.Second)
			defer cancel()
			snap, err := status.Fetch(ctx, socket)
			if err != nil {
				return &exitError{code: 3, err: err}
			}
			if output == "json" {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(snap)
			}
			return status.WriteText(c.OutOrStdout(), snap)
		},
	}
	c.Flags().StringVarP(&path, "config", "c", config.DefaultPath, "main configuration file (for the socket path)")
	c.Flags().StringVar(&socket, "socket", "", "status socket (default: [status] socket of the configuration)")
	c.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return c
}
