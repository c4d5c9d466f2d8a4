package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/iptables"
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
			cfg, err := loadArg(args)
			if err != nil {
				return err
			}
			// The box's own addresses decide where NodePort-like services
			// are served; reading them touches nothing.
			host, _ := hostaddrs.List(cfg.Dataplane.Interface)
			st := desired.Compute(desired.Input{Config: cfg, HostAddrs: host})
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
	k, err := openKernel(stateDir)
	if err != nil {
		return err
	}
	defer k.Close()
	filters := map[int]iptables.Runner{}
	for fam, r := range k.filters {
		filters[fam] = r
	}
	ops, err := dataplane.Diff(cfg, st, dataplane.DiffKernels{IPVS: k.ipvs, Ledger: k.ledger, Addrs: k.addrs, Sets: k.sets, Filters: filters})
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		fmt.Fprintln(w, "# the kernel already holds this configuration")
		return nil
	}
	fmt.Fprintf(w, "# a sync would make these changes (real servers leaving are drained at weight 0 first)\n")
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
	if len(st.NodeAddrs) > 0 {
		fmt.Fprintf(w, "\n# node addresses (NodePort-like services)\n")
		for _, a := range st.NodeAddrs {
			fmt.Fprintln(w, a)
		}
	}
	fmt.Fprintf(w, "\n# ipsets (ipset restore)\n")
	sets := st.SetEntries()
	for _, spec := range desired.SetSpecs() {
		fam := "inet"
		if spec.Family == 6 {
			fam = "inet6"
		}
		fmt.Fprintf(w, "create %s %s family %s\n", spec.Name, spec.Type, fam)
		for _, e := range slices.SortedFunc(slices.Values(sets[spec.Name]), desired.SetEntry.Compare) {
			fmt.Fprintf(w, "add %s %s\n", spec.Name, e)
		}
	}
	for _, fam := range []int{4, 6} {
		tool := map[int]string{4: "iptables", 6: "ip6tables"}[fam]
		fmt.Fprintf(w, "\n# %s (%s-restore --noflush)\n", tool, tool)
		for _, t := range desired.Tables(cfg.Dataplane, fam) {
			io.WriteString(w, desired.RestoreInput(t))
			for _, j := range t.Jumps {
				pos := "-A " + j.From
				if j.First {
					pos = "-I " + j.From + " 1"
				}
				fmt.Fprintf(w, "# jump: %s %s\n", pos, j.Rule())
			}
		}
	}
	for iface, vips := range st.Announce {
		fmt.Fprintf(w, "\n# ARP answered on %s for %v\n", iface, vips)
	}
	return nil
}
