package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
)

func newCleanupCommand() *cobra.Command {
	var path, stateDir string
	c := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove everything lbd created in the kernel, and nothing else",
		Long: `Remove the IPVS virtual servers lbd created or adopted (as recorded in
--state-dir) and lbd's dummy interface with its VIPs. Other IPVS services and
addresses are left alone. Stop the daemon first, or it puts everything back.
Run it before removing the package if the dataplane should go too.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			link := config.Defaults().Dataplane.Interface
			if cfg, err := config.Load(path); err == nil {
				link = cfg.Dataplane.Interface
			} else {
				fmt.Fprintf(c.ErrOrStderr(), "lbd: cannot read %s (%v); using interface %s\n", path, err, link)
			}
			ik, err := ipvs.OpenKernel()
			if err != nil {
				return err
			}
			defer ik.Close()
			ak, err := addrs.OpenKernel()
			if err != nil {
				return err
			}
			defer ak.Close()
			done, err := dataplane.Cleanup(ik, ipvs.FileLedger{Path: filepath.Join(stateDir, ledgerFile)}, ak, link)
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
	c.Flags().StringVar(&stateDir, "state-dir", defaultStateDir, "lbd's runtime state directory")
	return c
}
