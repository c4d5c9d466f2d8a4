package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/daemon"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/valve"
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
prints what the first full sync of a freshly (re)started lbd would write:
+ adds, ~ changes, - deletes, in ipvsadm and ip syntax. Health is seeded
from the kernel as on a restart (a real server lbd's virtual servers give
a weight starts healthy, one they hold at weight 0 unhealthy, others in
their initial state), with [consul] enabled Consul is read once (if it
does not answer within ` + daemon.ConsulWait.String() + ` the diff fails rather than show Consul's
real servers and services as removals), and the safety valve decides as
it would after a restart: deletions it would hold are not printed, and a
comment says so. It writes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path := pathArg(args)
			cfg, err := load(path)
			if err != nil {
				return err
			}
			// The box's own addresses decide where NodePort-like services
			// are served; reading them touches nothing.
			host, err := hostaddrs.List(cfg.Dataplane.Interface)
			if err != nil {
				fmt.Fprintf(c.ErrOrStderr(), "lbd plan: cannot list this box's addresses, so NodePort-like services get no node address: %v\n", err)
			}
			if !diff {
				return desired.WritePlan(c.OutOrStdout(), desired.Compute(desired.Input{Config: cfg, HostAddrs: host}), cfg)
			}
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ops, held, err := daemon.Diff(c.Context(), log, daemon.DiffOptions{Config: cfg, Path: path, HostAddrs: host, StateDir: stateDir})
			if err != nil {
				return err
			}
			return writeDiff(c.OutOrStdout(), ops, held)
		},
	}
	c.Flags().BoolVar(&diff, "diff", false, "print what the first full sync of a (re)started lbd would change in the kernel (needs root and IPVS)")
	c.Flags().StringVar(&stateDir, "state-dir", daemon.DefaultStateDir, "lbd's runtime state directory (which IPVS services it owns)")
	return c
}

func writeDiff(w io.Writer, ops []string, held valve.Hold) error {
	if held.Active() {
		fmt.Fprintf(w, "# the safety valve would hold back deletions (%s): they are not listed\n", held)
	}
	if len(ops) == 0 {
		_, err := fmt.Fprintln(w, "# the kernel already holds this configuration")
		return err
	}
	fmt.Fprintf(w, "# the first full sync of a (re)started lbd would make these changes (real servers leaving are drained at weight 0 first)\n")
	for _, op := range ops {
		fmt.Fprintln(w, op)
	}
	return nil
}
