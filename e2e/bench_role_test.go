//go:build e2e

package e2e

// The benchmark's measuring programs. TestBenchDataplane re-executes the
// test binary with one of these roles under `ip netns exec`, so that every
// netlink socket and /proc/net read belongs to a fresh namespace (IPVS keeps
// deleted destinations in a trash list, so a second load in the same
// namespace is slower). Each role prints one JSON line on stdout.

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

const (
	// roleBenchLBD: lbd's dataplane syncs the generated configuration.
	roleBenchLBD = "bench-lbd"
	// roleBenchRestore: ipvsadm -R loads the same rules.
	roleBenchRestore = "bench-ipvsadm"
)

// runBenchRoleIfAny runs a benchmark role and exits when the binary was
// started as one; it returns at once otherwise. TestMain calls it before
// topo.RunRoleIfAny, which refuses roles it does not know.
func runBenchRoleIfAny() {
	role := os.Getenv(topo.RoleEnv)
	var run func([]string) (any, error)
	switch role {
	case roleBenchLBD:
		run = benchLBDRole
	case roleBenchRestore:
		run = benchRestoreRole
	default:
		return
	}
	res, err := run(os.Args[1:])
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(res)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", topo.RoleEnv, role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// syncFigures is one sync as the benchmark saw it. Reads and Writes are
// counted at the kernel interfaces, not taken from the sync's own report.
type syncFigures struct {
	Reason string
	Whole  time.Duration // the reconciler's whole sync (SyncResult.Duration)
	Addrs  time.Duration // the address applier's Apply
	IPVS   time.Duration // the IPVS applier's Apply, ledger included
	Filter time.Duration // the packet filter: the ipset and iptables appliers' Apply
	Ledger time.Duration // reading and writing the ownership ledger file
	Reads  int
	Writes int
	// Reported* are what the sync said of itself, for cross-checking.
	ReportedDumps, ReportedWrites int
}

// lbdRoundResult is what one bench-lbd role measured.
type lbdRoundResult struct {
	ConfigLoad time.Duration
	Cold       syncFigures // first sync: empty kernel to N × M
	Weight     syncFigures // event-driven sync after one weight change
	Full       syncFigures // periodic full reconcile with nothing to change
	SaveN      time.Duration
	SaveLines  int
	PeakRSSKiB int // this role process, for reference only
}

// benchLBDRole runs lbd's reconciler (dataplane.Dataplane with the real
// netlink kernels, as `lbd run` wires it) in this namespace: a cold sync of
// the configuration, an event-driven sync after one weight change, then a
// periodic full reconcile with nothing to change; then it times
// `ipvsadm -Sn` of the resulting table and checks the table is exactly the
// desired one.
// errTakenByPeriodic: a periodic full reconcile ran after a change and
// applied it, so no event-driven sync will come for that change.
var errTakenByPeriodic = errors.New("the change was applied by a periodic sync")

func benchLBDRole(args []string) (any, error) {
	fs := flag.NewFlagSet(roleBenchLBD, flag.ContinueOnError)
	cfgPath := fs.String("config", "", "lbd.toml to load")
	stateDir := fs.String("state-dir", "", "directory for the ownership ledger")
	period := fs.Duration("sync-period", 5*time.Second, "sync_period: the wait before the periodic full reconcile")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the three syncs here")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var res lbdRoundResult
	start := time.Now()
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		return nil, err
	}
	res.ConfigLoad = time.Since(start)

	kIPVS, err := ipvs.OpenKernel()
	if err != nil {
		return nil, err
	}
	defer kIPVS.Close()
	kAddrs, err := addrs.OpenKernel()
	if err != nil {
		return nil, err
	}
	defer kAddrs.Close()

	kSets, err := ipset.OpenKernel()
	if err != nil {
		return nil, err
	}
	defer kSets.Close()

	var n kernelCounts
	ledger := &timedLedger{l: ownership.FileLedger{Path: filepath.Join(*stateDir, "ipvs-owned.json")}}
	ia := &timedIPVS{a: ipvs.New(countedIPVS{kIPVS, &n}, ledger)}
	aa := &timedAddrs{a: addrs.New(countedAddrs{kAddrs, &n}, cfg.Dataplane.Interface)}
	// The packet filter as lbd run wires it (IPv4 rules: the workload has
	// no IPv6 service, and ip6tables' rules are the same fixed few).
	var filterTime time.Duration
	sa := timedSets{a: ipset.New(countedSets{kSets, &n}), d: &filterTime}
	ra := timedRules{a: iptables.New(countedRules{iptables.NewExecRunner(4, iptables.Detect()), &n}), d: &filterTime}
	timings := cfg.Sync
	// A short sync_period brings the periodic full reconcile soon after the
	// weight change; the runner's other timings stay the configuration's.
	timings.SyncPeriod = *period
	dp := dataplane.New(dataplane.Options{
		IPVS:     ia,
		Addrs:    aa,
		Sets:     sa,
		Filters:  map[int]dataplane.FilterApplier{4: ra},
		Timeouts: countedTimeouts{kIPVS, &n},
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Sync:     timings,
	})

	type outcome struct {
		f   syncFigures
		res dataplane.SyncResult
	}
	results := make(chan outcome, 16)
	var prevReads, prevWrites int64
	dp.OnSync(func(r dataplane.SyncResult) {
		f := syncFigures{
			Reason: r.Reason.String(), Whole: r.Duration, Addrs: aa.d, IPVS: ia.d, Filter: filterTime, Ledger: ledger.d,
			Reads: int(n.reads.Load() - prevReads), Writes: int(n.writes.Load() - prevWrites),
			ReportedDumps: r.Dumps, ReportedWrites: r.Writes,
		}
		prevReads, prevWrites, aa.d, ia.d, filterTime, ledger.d = n.reads.Load(), n.writes.Load(), 0, 0, 0, 0
		results <- outcome{f, r}
	})
	ctx, cancel := context.WithCancel(context.Background())
	loopDone := make(chan struct{})
	go func() { dp.Loop(ctx); close(loopDone) }()
	defer func() { cancel(); <-loopDone }()

	// next returns the next sync for reason. Periodic full reconciles come
	// every sync_period whatever was requested meanwhile: one that comes
	// while a requested sync is awaited is checked and passed over.
	next := func(what, reason string) (syncFigures, error) {
		for {
			select {
			case o := <-results:
				switch {
				case o.res.Err != nil:
					return o.f, fmt.Errorf("%s: %w", what, o.res.Err)
				case o.res.Waiting || o.res.Held.Active():
					return o.f, fmt.Errorf("%s: sync waiting or held: %+v", what, o.res)
				case o.f.Reason == "periodic" && reason == "requested":
					if o.f.Writes != 0 {
						// It ran after the change and took it.
						return o.f, errTakenByPeriodic
					}
					continue
				case o.f.Reason != reason:
					return o.f, fmt.Errorf("%s: got a %s sync, want %s", what, o.f.Reason, reason)
				}
				return o.f, nil
			case <-time.After(time.Hour):
				return syncFigures{}, fmt.Errorf("%s: no sync within an hour", what)
			}
		}
	}
	stopProfile := func() {}
	if *cpuProfile != "" {
		if stopProfile, err = startCPUProfile(*cpuProfile); err != nil {
			return nil, err
		}
		defer stopProfile() // on errors; stopping twice is harmless
	}
	dp.SetSources(dataplane.Sources{Config: cfg, Edition: "bench-0"})
	if res.Cold, err = next("cold sync", "initial"); err != nil {
		return nil, err
	}
	// One weight change, as an edit of one real server would bring it;
	// several, in services spread over the table, and the median taken: one
	// sync of ~100 ms under emulation is at the mercy of the host.
	var changes []syncFigures
	edited := cfg
	for tries := 0; len(changes) < weightChanges; tries++ {
		i := len(changes)
		svc := (2*i + 1) * len(cfg.Services) / (2 * weightChanges)
		edited = withWeight(edited, svc, 0, edited.Services[svc].RealServers[0].Weight+1)
		dp.SetSources(dataplane.Sources{Config: edited, Edition: fmt.Sprintf("bench-%d", tries+1)})
		f, err := next("sync after a weight change", "requested")
		if errors.Is(err, errTakenByPeriodic) && tries < 3*weightChanges {
			continue // the same change again, as an event-driven sync
		}
		if err != nil {
			return nil, err
		}
		changes = append(changes, f)
	}
	res.Weight = medianChange(changes)
	if res.Full, err = next("periodic full reconcile", "periodic"); err != nil {
		return nil, err
	}
	stopProfile()
	cancel()
	<-loopDone

	// ipvsadm -Sn of the same table in the same namespace: the reference for
	// the full reconcile. Its output goes to a file (tmpfs) to be checked.
	saved := filepath.Join(*stateDir, "ipvsadm-Sn.txt")
	f, err := os.Create(saved)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("ipvsadm", "-Sn")
	cmd.Stdout, cmd.Stderr = f, os.Stderr
	start = time.Now()
	err = cmd.Run()
	res.SaveN = time.Since(start)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("ipvsadm -Sn: %w", err)
	}
	if res.SaveLines, err = checkTable(saved, edited); err != nil {
		return nil, err
	}
	if err := checkVIPs(kAddrs, cfg.Dataplane.Interface, edited); err != nil {
		return nil, err
	}
	res.PeakRSSKiB, _ = procStatusKiB("self", "VmHWM")
	return res, nil
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { pprof.StopCPUProfile(); f.Close() }) }, nil
}

// withWeight returns a copy of cfg in which one real server has weight w;
// cfg itself is never changed (the dataplane keeps it as applied).
func withWeight(cfg *config.Config, svc, rs, w int) *config.Config {
	c := *cfg
	c.Services = slices.Clone(cfg.Services)
	s := &c.Services[svc]
	s.RealServers = slices.Clone(s.RealServers)
	s.RealServers[rs].Weight = w
	return &c
}

// weightChanges is how many single weight changes a round makes.
const weightChanges = 5

// medianChange is the weight change of median duration, with the most
// kernel reads and writes any of them made (a target is met only when
// every change meets it).
func medianChange(fs []syncFigures) syncFigures {
	sorted := slices.Clone(fs)
	slices.SortFunc(sorted, func(a, b syncFigures) int { return cmp.Compare(a.Whole, b.Whole) })
	m := sorted[len(sorted)/2]
	for _, f := range fs {
		m.Reads, m.Writes = max(m.Reads, f.Reads), max(m.Writes, f.Writes)
		m.ReportedDumps, m.ReportedWrites = max(m.ReportedDumps, f.ReportedDumps), max(m.ReportedWrites, f.ReportedWrites)
	}
	return m
}

// checkTable compares an ipvsadm -Sn file with what the configuration asks
// for, line by line, and returns its number of lines.
func checkTable(path string, cfg *config.Config) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	var want strings.Builder
	if err := desired.WriteIPVS(&want, desired.Compute(desired.Input{Config: cfg})); err != nil {
		return 0, err
	}
	got, exp := sortedLines(string(b)), sortedLines(want.String())
	if !slices.Equal(got, exp) {
		for i := range min(len(got), len(exp)) {
			if got[i] != exp[i] {
				return 0, fmt.Errorf("IPVS table differs from the configuration: %d lines, want %d; first difference: %q, want %q", len(got), len(exp), got[i], exp[i])
			}
		}
		return 0, fmt.Errorf("IPVS table differs from the configuration: %d lines, want %d", len(got), len(exp))
	}
	return len(got), nil
}

func checkVIPs(k *addrs.NetlinkKernel, link string, cfg *config.Config) error {
	on, _, err := k.Dump(link)
	if err != nil {
		return err
	}
	want := desired.Compute(desired.Input{Config: cfg}).VIPs
	got := slices.DeleteFunc(on, netip.Addr.IsLinkLocalUnicast)
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s holds %d addresses, want the %d VIPs", link, len(got), len(want))
	}
	return nil
}

// restoreResult is what one bench-ipvsadm role measured.
type restoreResult struct {
	Restore  time.Duration
	Services int
	Dests    int
}

// benchRestoreRole times `ipvsadm -R` of a rules file in this namespace and
// counts what the kernel then holds.
func benchRestoreRole(args []string) (any, error) {
	fs := flag.NewFlagSet(roleBenchRestore, flag.ContinueOnError)
	rules := fs.String("rules", "", "ipvsadm -Sn file to restore")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	in, err := os.Open(*rules)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	cmd := exec.Command("ipvsadm", "-R")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, os.Stderr, os.Stderr
	start := time.Now()
	err = cmd.Run()
	res := restoreResult{Restore: time.Since(start)}
	if err != nil {
		return nil, fmt.Errorf("ipvsadm -R: %w", err)
	}
	res.Services, res.Dests, err = countProcIPVS()
	return res, err
}

// countProcIPVS counts the virtual servers and destinations of this
// namespace in /proc/net/ip_vs.
func countProcIPVS() (services, dests int, err error) {
	f, err := os.Open("/proc/net/ip_vs")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "TCP ") || strings.HasPrefix(line, "UDP "):
			services++
		case strings.HasPrefix(strings.TrimSpace(line), "-> ") && !strings.Contains(line, "RemoteAddress"):
			dests++
		}
	}
	return services, dests, sc.Err()
}

// procStatusKiB reads one "Name: N kB" field of /proc/PID/status.
func procStatusKiB(pid, field string) (int, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return statusField(f, field)
}

func statusField(r io.Reader, field string) (int, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		var kib int
		if _, err := fmt.Sscanf(strings.TrimSpace(value), "%d kB", &kib); err != nil {
			return 0, fmt.Errorf("%s: %q: %w", field, value, err)
		}
		return kib, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New(field + " not found")
}
