package dataplane

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/runner"
	"github.com/lbdproject/lbd/dataplane/valve"
	"github.com/lbdproject/lbd/lvs"
)

// DryRunIPVS reads through to a real IPVS kernel and records, instead of
// making, every write: `lbd plan --diff` runs the real appliers over it, so
// what it prints is exactly what a full sync would do.
type DryRunIPVS struct {
	Kernel ipvs.Kernel
	Ops    []string
}

var _ ipvs.Kernel = (*DryRunIPVS)(nil)

func (d *DryRunIPVS) Dump() ([]ipvs.Service, error) { return d.Kernel.Dump() }

func (d *DryRunIPVS) record(format string, args ...any) error {
	d.Ops = append(d.Ops, fmt.Sprintf(format, args...))
	return nil
}

func (d *DryRunIPVS) AddService(s ipvs.Service) error {
	return d.record("+ %s", desired.ServiceRule(s.Desired()))
}

func (d *DryRunIPVS) UpdateService(s ipvs.Service) error {
	return d.record("~ %s", strings.Replace(desired.ServiceRule(s.Desired()), "-A", "-E", 1))
}

func (d *DryRunIPVS) DeleteService(k lvs.Key) error {
	return d.record("- -D %s", svcFlag(k))
}

func (d *DryRunIPVS) AddDest(k lvs.Key, dst ipvs.Dest) error {
	return d.record("+ -a %s -r %s -m -w %d", svcFlag(k), dst.Addr, dst.Weight)
}

func (d *DryRunIPVS) UpdateDest(k lvs.Key, dst ipvs.Dest) error {
	return d.record("~ -e %s -r %s -m -w %d", svcFlag(k), dst.Addr, dst.Weight)
}

func (d *DryRunIPVS) DeleteDest(k lvs.Key, a netip.AddrPort) error {
	return d.record("- -d %s -r %s", svcFlag(k), a)
}

func svcFlag(k lvs.Key) string {
	rule := desired.ServiceRule(desired.Service{Key: k, Scheduler: "x"})
	rule = strings.TrimPrefix(rule, "-A ")
	return strings.TrimSuffix(rule, " -s x")
}

// DryRunAddrs reads through to the real address table and records writes.
type DryRunAddrs struct {
	Kernel addrs.Kernel
	Ops    []string
}

var _ addrs.Kernel = (*DryRunAddrs)(nil)

// LinkChecker tells whether a link exists without creating it: addrs.Kernel
// can only ensure one. A kernel DryRunAddrs wraps should implement it.
type LinkChecker interface {
	// LinkExists reports whether the link is there; an error when it is
	// but a sync could not use it.
	LinkExists(name string) (bool, error)
}

// EnsureLink records the creation the real sync would do, without doing
// it. A kernel that cannot tell (no LinkChecker) is taken to have the link.
func (d *DryRunAddrs) EnsureLink(name string) error {
	lc, ok := d.Kernel.(LinkChecker)
	if !ok {
		return nil
	}
	exists, err := lc.LinkExists(name)
	if err != nil {
		return err
	}
	if !exists {
		d.Ops = append(d.Ops, fmt.Sprintf("+ ip link add %s type dummy", name))
	}
	return nil
}

func (d *DryRunAddrs) Dump(link string) ([]netip.Addr, map[netip.Addr]string, error) {
	return d.Kernel.Dump(link)
}

func (d *DryRunAddrs) Add(link string, a netip.Addr) error {
	d.Ops = append(d.Ops, fmt.Sprintf("+ ip addr add %s dev %s", netip.PrefixFrom(a, a.BitLen()), link))
	return nil
}

func (d *DryRunAddrs) Delete(link string, a netip.Addr) error {
	d.Ops = append(d.Ops, fmt.Sprintf("- ip addr del %s dev %s", netip.PrefixFrom(a, a.BitLen()), link))
	return nil
}

// readOnlyLedger lets a dry run read ownership without recording any.
type readOnlyLedger struct{ ipvs.Ledger }

func (readOnlyLedger) SetOwned(map[lvs.Key]bool) error { return nil }

// DryRunSets reads through to the real ipsets and records writes.
type DryRunSets struct {
	Kernel ipset.Kernel
	Ops    []string
}

var _ ipset.Kernel = (*DryRunSets)(nil)

func (d *DryRunSets) Dump(set func(name string, t desired.SetType, family int) func(desired.SetEntry)) error {
	return d.Kernel.Dump(set)
}

func (d *DryRunSets) Create(s desired.SetSpec) error {
	op := fmt.Sprintf("+ ipset create %s %s", s.Name, s.Type)
	if s.SkbInfo {
		op += " skbinfo" // its entries carry firewall marks
	}
	d.Ops = append(d.Ops, op)
	return nil
}

func (d *DryRunSets) Destroy(name string) error {
	d.Ops = append(d.Ops, "- ipset destroy "+name)
	return nil
}

func (d *DryRunSets) Add(set string, e desired.SetEntry) error {
	d.Ops = append(d.Ops, fmt.Sprintf("+ ipset add %s %s", set, e))
	return nil
}

func (d *DryRunSets) Del(set string, e desired.SetEntry) error {
	d.Ops = append(d.Ops, fmt.Sprintf("- ipset del %s %s", set, e))
	return nil
}

// DryRunFilter reads through to iptables-save and records the
// iptables-restore input a sync would feed, line by line.
type DryRunFilter struct {
	Runner iptables.Runner
	Tool   string // for the record: iptables or ip6tables
	Ops    []string
}

func (d *DryRunFilter) Save(table string) (string, error) { return d.Runner.Save(table) }

func (d *DryRunFilter) Restore(input string) error {
	for _, l := range strings.Split(strings.TrimSpace(input), "\n") {
		d.Ops = append(d.Ops, fmt.Sprintf("~ %s-restore: %s", d.Tool, l))
	}
	return nil
}

// DiffKernels are the kernel subsystems a dry run reads; Sets and Filters
// may be nil. Addrs should be a LinkChecker too, else the dry run takes
// the dummy link to exist.
type DiffKernels struct {
	IPVS    ipvs.Kernel
	Ledger  ipvs.Ledger
	Addrs   addrs.Kernel
	Sets    ipset.Kernel
	Filters map[int]iptables.Runner
}

// FirstSync is what the first sync of a freshly (re)started lbd works
// from: the inputs the daemon sets before it.
type FirstSync struct {
	Sources   Sources
	Health    map[lvs.HealthKey]bool
	HostAddrs []netip.Addr
	// RestartEdition and RestartKernel are the safety valve's restart
	// baseline (SetRestartBaseline); without RestartKernel there is none.
	RestartEdition string
	RestartKernel  []desired.Service
}

// DryRun returns what the first sync of a Dataplane fed with in would
// write to the kernels k, without writing: lines starting with + (add), ~
// (change) and - (delete), per subsystem in sync order; and what that
// sync's safety valve would hold back. It runs the sync the daemon runs,
// valve included, over kernels that record writes instead of making them,
// so what it prints is what that sync would do.
func DryRun(in FirstSync, k DiffKernels) ([]string, valve.Hold, error) {
	cfg := in.Sources.Config
	da := &DryRunAddrs{Kernel: k.Addrs}
	ds := &DryRunSets{Kernel: k.Sets}
	di := &DryRunIPVS{Kernel: k.IPVS}
	opts := Options{IPVS: ipvs.New(di, readOnlyLedger{k.Ledger}), Addrs: addrs.New(da, cfg.Dataplane.Interface), Sync: cfg.Sync}
	if k.Sets != nil {
		opts.Sets = ipset.New(ds)
	}
	filters := map[int]*DryRunFilter{}
	opts.Filters = map[int]FilterApplier{}
	for fam, r := range k.Filters {
		filters[fam] = &DryRunFilter{Runner: r, Tool: desired.FilterTool(fam)}
		opts.Filters[fam] = iptables.New(filters[fam])
	}
	d := New(opts)
	d.in = inputs{src: in.Sources, health: in.Health, hostAddrs: in.HostAddrs}
	if in.RestartKernel != nil {
		d.in.restart = &restartBaseline{edition: in.RestartEdition, kernel: in.RestartKernel}
	}
	err := d.sync(context.Background(), runner.Initial)
	ops := append(slices.Clone(da.Ops), ds.Ops...)
	for _, fam := range []int{4, 6} {
		if f := filters[fam]; f != nil {
			ops = append(ops, f.Ops...)
		}
	}
	return append(ops, di.Ops...), d.Last().Held, err
}
