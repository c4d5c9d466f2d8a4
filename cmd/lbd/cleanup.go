package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/daemon"
)

func newCleanupCommand() *cobra.Command {
	var path, stateDir string
	c := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything lbd created in the kernel, and nothing else",
		Long: `Remove lbd's iptables chains and the jumps to them, the IPVS virtual
servers lbd created or adopted (as recorded in --state-dir), lbd's dummy
interface with its VIPs, and lbd's ipsets. Other rules, sets, IPVS services
and addresses are left alone. Stop the daemon first, or it puts everything back.
Run it before removing the package if the dataplane should go too.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := config.Load(path)
			if err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "lbd: cannot read %s (%v); using the default interface and mark\n", path, err)
				d := config.Defaults()
				cfg = &d
			}
			done, err := daemon.Cleanup(cfg, stateDir)
			for _, d := range done {
				fmt.Fprintln(c.OutOrStdout(), "removed", d)
			}
			if len(done) == 0 && err == nil {
				fmt.Fprintln(c.OutOrStdout(), "nothing of lbd's to remove")
			}
			return err
		},
	}
	c.Flags().StringVarP(&path, "config", "c", config.DefaultPath, "main configuration file (for the interface name)")
	c.Flags().StringVar(&stateDir, "state-dir", daemon.DefaultStateDir, "lbd's runtime state directory")
	return c
}
