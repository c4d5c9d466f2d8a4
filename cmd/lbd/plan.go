package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
)

func newPlanCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "plan [PATH]",
		Short: "Print the kernel state the configuration asks for, without touching the kernel",
		Long: `Print the complete kernel state lbd would program for the configuration at
PATH (default ` + config.DefaultPath + `, with its conf.d): the IPVS virtual
servers and destinations in ipvsadm -Sn form, then the VIPs bound to the
dummy interface. Real servers are shown with their check's initial state,
since plan runs no health checks.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := config.DefaultPath
			if len(args) == 1 {
				path = args[0]
			}
			cfg, err := config.Load(path)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			return writePlan(c.OutOrStdout(), cfg, desired.Compute(desired.Input{Config: cfg}))
		},
	}
}

func writePlan(w io.Writer, cfg *config.Config, st desired.State) error {
	fmt.Fprintln(w, "# IPVS (ipvsadm -Sn)")
	if err := desired.WriteIPVS(w, st); err != nil {
		return err
	}
	vips := make([]string, len(st.VIPs))
	for i, v := range st.VIPs {
		vips[i] = v.String()
	}
	fmt.Fprintf(w, "\n# VIPs on %s\n%s\n", cfg.Dataplane.Interface, strings.Join(vips, "\n"))
	return nil
}
