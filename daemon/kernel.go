package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/conntrack"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/drift"
	"github.com/lbdproject/lbd/dataplane/floating"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/dataplane/syncd"
)

// LedgerFile, in the state directory, lists the IPVS services lbd owns.
const LedgerFile = "ipvs-owned.json"

// kernel holds the handles of every kernel subsystem lbd drives, opened in
// the process's network namespace.
type kernel struct {
	ipvs    *ipvs.NetlinkKernel
	addrs   *addrs.NetlinkKernel
	float   *floating.NetlinkKernel
	syncd   *syncd.NetlinkKernel
	sets    *ipset.NetlinkKernel
	ct      *conntrack.Cleaner
	filters map[int]*iptables.ExecRunner
	backend iptables.Backend
	// children records the iptables-restore processes the filters start:
	// their nftables transactions are lbd's own, not drift.
	children iptables.Children
	ledger   ownership.FileLedger
}

func openKernel(stateDir string) (_ *kernel, err error) {
	k := &kernel{ledger: ownership.FileLedger{Path: filepath.Join(stateDir, LedgerFile)}}
	defer func() {
		if err != nil {
			k.Close()
		}
	}()
	if k.ipvs, err = ipvs.OpenKernel(); err != nil {
		return nil, err
	}
	if k.addrs, err = addrs.OpenKernel(); err != nil {
		return nil, err
	}
	if k.float, err = floating.OpenKernel(); err != nil {
		return nil, err
	}
	if k.syncd, err = syncd.Open(); err != nil {
		return nil, err
	}
	if k.sets, err = ipset.OpenKernel(); err != nil {
		return nil, err
	}
	if k.ct, err = conntrack.Open(); err != nil {
		return nil, err
	}
	k.backend = iptables.Detect()
	k.filters = map[int]*iptables.ExecRunner{}
	for _, fam := range []int{4, 6} {
		r, err := iptables.LookupRunner(fam, k.backend)
		switch {
		case err == nil:
			k.filters[fam] = r.Recording(&k.children)
		case fam == 4:
			return nil, err
		}
	}
	return k, nil
}

// Close releases every handle that was opened.
func (k *kernel) Close() {
	if k.ipvs != nil {
		k.ipvs.Close()
	}
	if k.addrs != nil {
		k.addrs.Close()
	}
	if k.sets != nil {
		k.sets.Close()
	}
	if k.float != nil {
		k.float.Close()
	}
	if k.syncd != nil {
		k.syncd.Close()
	}
	if k.ct != nil {
		k.ct.Close()
	}
}

// newDataplane builds the dataplane over k for cfg.
func (k *kernel) newDataplane(cfg *config.Config, log *slog.Logger, announce dataplane.Announcer) *dataplane.Dataplane {
	filters := map[int]dataplane.FilterApplier{}
	for fam, r := range k.filters {
		filters[fam] = iptables.New(r)
	}
	log.Info("packet filter", "iptables", k.filters[4].String(), "backend", string(k.backend), "ipv6", k.filters[6] != nil)
	// A link of lbd's name without lbd's mark is someone else's, except
	// after an upgrade from an lbd that did not mark it: then this boot's
	// state directory shows that lbd ran before.
	va := addrs.New(k.addrs, cfg.Dataplane.Interface)
	va.AdoptUnmarked, va.Log = k.ranBefore(), log
	vs := ipvs.New(k.ipvs, k.ledger)
	k.recoverLedger(vs, cfg.Dataplane.Interface, log)
	var fa dataplane.FloatingApplier
	if len(cfg.VRRP) > 0 {
		fa = floating.New(k.float)
	}
	var sa dataplane.SyncApplier
	if cfg.IPVSSync.Enabled {
		sa = syncd.New(k.syncd)
	}
	return dataplane.New(dataplane.Options{
		IPVS:      vs,
		Addrs:     va,
		Floating:  fa,
		Syncd:     sa,
		Timeouts:  k.ipvs,
		Conntrack: k.ct,
		Sets:      ipset.New(k.sets),
		Filters:   filters,
		Announce:  announce,
		Logger:    log,
		Sync:      cfg.Sync,
	})
}

// ranBefore reports whether lbd ran on this boot before: its state
// directory, in /run, holds what an earlier run wrote.
func (k *kernel) ranBefore() bool {
	dir := filepath.Dir(k.ledger.Path)
	for _, name := range []string{LedgerFile, ownership.AppliedFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// recoverLedger sets an unreadable ownership ledger aside before the
// first sync, which would otherwise fail on it forever, and has vs take
// the safe side until the new ledger is rebuilt (ownership.Recovery).
func (k *kernel) recoverLedger(vs *ipvs.Applier, link string, log *slog.Logger) {
	rec, err := k.ledger.Recover(func() ([]netip.Addr, error) {
		on, _, err := k.addrs.Dump(link)
		return on, err
	}, time.Now())
	if rec == nil {
		if err != nil {
			log.Error("cannot read the ownership ledger; syncs will fail until it can be read", "error", err)
		}
		return
	}
	vs.AdoptAddrs(rec.VIPs)
	log.Error("the ownership ledger was unreadable and is set aside; lbd starts a new one and deletes no virtual server it did not create in this run. "+
		"Virtual servers it is asked for are taken over only where their VIP is on its interface; any other one is reported and left alone (lbd status). "+
		"Compare the file set aside with ipvsadm -Ln and remove what is stale by hand",
		"set_aside", rec.Aside, "cause", rec.Cause, "vips_on_interface", len(rec.VIPs), "vips_error", err)
}

// Cleanup removes everything lbd created, and nothing else: rules first
// (they use the sets), then virtual servers and the dummy link, then the
// sets. It returns what it removed, one line each.
func Cleanup(cfg *config.Config, stateDir string) ([]string, error) {
	k, err := openKernel(stateDir)
	if err != nil {
		return nil, err
	}
	defer k.Close()
	var done []string
	var errs []error
	for fam, r := range k.filters {
		d, err := iptables.Cleanup(r, desired.TablesFor(cfg, fam))
		done = append(done, d...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", desired.FilterTool(fam), err))
		}
	}
	d, err := ownership.Cleanup(k.ipvs, k.ledger, k.addrs, cfg.Dataplane.Interface)
	done = append(done, d...)
	errs = append(errs, err)
	d, err = ipset.Cleanup(k.sets)
	done = append(done, d...)
	errs = append(errs, err)
	return done, errors.Join(errs...)
}

// driftOptions has the drift watcher report to dp what the kernel tells
// of lbd's link, addresses and, with iptables-nft, rules.
func (k *kernel) driftOptions(cfg *config.Config, log *slog.Logger, dp *dataplane.Dataplane) drift.Options {
	o := drift.Options{Link: cfg.Dataplane.Interface, Expect: dp.ExpectsVIP, Own: k.children.Started, Logger: log,
		OnDrift: func(what string) {
			log.Warn("dataplane drift; repairing", "what", what)
			dp.Repair()
		}}
	if k.backend == iptables.NFT {
		o.Tables = map[int][]desired.Table{}
		for fam := range k.filters {
			o.Tables[fam] = desired.TablesFor(cfg, fam)
		}
	}
	return o
}
