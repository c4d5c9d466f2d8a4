package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/hostaddrs"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/discovery/consul"
	"github.com/lbdproject/lbd/discovery/merge"
	"github.com/lbdproject/lbd/healthcheck"
)

// consulWait bounds how long plan --diff waits for Consul's first complete
// answer.
const consulWait = 10 * time.Second

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
their initial state), and with [consul] enabled Consul is read once: if it
does not answer within ` + consulWait.String() + ` the diff fails rather than show Consul's
real servers and services as removals. It writes nothing.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cfg, err := loadArg(args)
			if err != nil {
				return err
			}
			// The box's own addresses decide where NodePort-like services
			// are served; reading them touches nothing.
			host, _ := hostaddrs.List(cfg.Dataplane.Interface)
			if !diff {
				return writePlan(c.OutOrStdout(), cfg, desired.Compute(desired.Input{Config: cfg, HostAddrs: host}))
			}
			log := slog.New(slog.NewTextHandler(c.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			return runDiff(c.Context(), log, c.OutOrStdout(), cfg, host, stateDir)
		},
	}
	c.Flags().BoolVar(&diff, "diff", false, "print what the first full sync of a (re)started lbd would change in the kernel (needs root and IPVS)")
	c.Flags().StringVar(&stateDir, "state-dir", defaultStateDir, "lbd's runtime state directory (which IPVS services it owns)")
	return c
}

// runDiff prints what a freshly (re)started lbd's first full sync would
// change: with the health and the Consul answer that sync would see.
func runDiff(ctx context.Context, log *slog.Logger, w io.Writer, cfg *config.Config, host []netip.Addr, stateDir string) error {
	// The kernel first: without root there is no point in waiting for
	// Consul.
	k, err := openKernel(stateDir)
	if err != nil {
		return err
	}
	defer k.Close()
	seed, err := readSeed(k.ipvs, k.ledger)
	if err != nil {
		return fmt.Errorf("seeding health from the kernel: %w", err)
	}
	var snap consul.Snapshot
	if cfg.Consul.Enabled {
		if snap, err = readConsul(ctx, log, cfg, consulWait); err != nil {
			return err
		}
	}
	st := diffState(log, cfg, host, snap, seed)
	filters := map[int]iptables.Runner{}
	for fam, r := range k.filters {
		filters[fam] = r
	}
	ops, err := dataplane.Diff(cfg, st, dataplane.DiffKernels{IPVS: k.ipvs, Ledger: k.ledger, Addrs: k.addrs, Sets: k.sets, Filters: filters})
	if err != nil {
		return err
	}
	return writeDiff(w, ops)
}

// diffState is the desired state of the first sync after a (re)start: the
// configuration merged with Consul's snapshot as apply merges them, and
// every check new, seeded from the kernel.
func diffState(log *slog.Logger, cfg *config.Config, host []netip.Addr, snap consul.Snapshot, seed healthcheck.Seed) desired.State {
	res := merge.Merge(cfg, snap)
	for _, p := range res.Problems {
		log.Warn("consul registration refused", "subject", p.Subject, "problem", p.Msg)
	}
	return desired.Compute(desired.Input{
		Config: cfg, Discovered: res.Reals, DiscoveredServices: res.Services,
		Health: firstHealth(cfg, res, seed), HostAddrs: host,
	})
}

// readConsul follows Consul until it has answered every query of cfg once,
// as the daemon waits for before its first sync, or until wait has passed.
func readConsul(ctx context.Context, log *slog.Logger, cfg *config.Config, wait time.Duration) (consul.Snapshot, error) {
	client, err := consul.NewClient(cfg.Consul)
	if err != nil {
		return consul.Snapshot{}, fmt.Errorf("consul: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	w := consul.New(consul.Options{Client: client, Logger: log.With("source", "consul"), VirtualServiceTag: cfg.Consul.VirtualServices.Tag})
	w.SetQueries(merge.Queries(cfg))
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	var last consul.Snapshot
	// Updates closes when Run returns: at the deadline, or at once if it
	// cannot run.
	for snap := range w.Updates() {
		if snap.Synced {
			cancel()
			<-runErr
			if snap.Err != "" {
				log.Warn("consul answered with problems; the diff shows what lbd would see", "problems", snap.Err)
			}
			return snap, nil
		}
		last = snap
	}
	if err := <-runErr; err != nil {
		return consul.Snapshot{}, fmt.Errorf("consul: %w", err)
	}
	why := last.Err
	if why == "" {
		why = w.Status().LastError
	}
	if why == "" {
		why = "no complete answer yet"
	}
	return consul.Snapshot{}, fmt.Errorf("consul at %s did not answer within %v (%s); without its answer the diff would show every real server and service it provides as a removal", cfg.Consul.Address, wait, why)
}

func writeDiff(w io.Writer, ops []string) error {
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
		tool := iptables.Tool(fam)
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
