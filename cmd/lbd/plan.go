package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
)

func newPlanCommand() *cobra.Command {
	var diff bool
	var stateDir string
	c := &cobra.Command{
		Use:   "plan [PATH]",
		Short: "Print the kernel state the configuration asks for, without touching the kernel",
		Long: `Print the complete kernel state lbd would program for the configuration at
PATH (default ` + config.DefaultPath + `, with its conf.d): the IPVS virtual
servers and destinations in ipvsadm -Sn form, then the VIPs bound to the
dummy interface. Real servers are shown with their check's initial state,
since plan runs no health checks.

With --diff (root, on the box lbd runs on) it reads the kernel instead and
prints what a full sync would write: + adds, ~ changes, - deletes, in
ipvsadm and ip syntax. It writes nothing.`,
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
			st := desired.Compute(desired.Input{Config: cfg})
			if !diff {
				return writePlan(c.OutOrStdout(), cfg, st)
			}
			return writeDiff(c.OutOrStdout(), cfg, st, stateDir)
		},
	}
	c.Flags().BoolVar(&diff, "diff", false, "print what a sync would change in the kernel (needs root and IPVS)")
	c.Flags().StringVar(&stateDir, "state-dir", defaultStateDir, "lbd's runtime state directory (which IPVS services it owns)")
	return c
}

func writeDiff(w io.Writer, cfg *config.Config, st desired.State, stateDir string) error {
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
	ops, err := dataplane.Diff(cfg, st, ik, ipvs.FileLedger{Path: filepath.Join(stateDir, ledgerFile)}, ak)
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		fmt.Fprintln(w, "# the kernel already holds this configuration")
		return nil
	}
	fmt.Fprintf(w, "# a sync would make %d changes (real servers leaving are drained at weight 0 first)\n", len(ops))
	for _, op := range ops {
		fmt.Fprintln(w, op)
	}
	return nil
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
