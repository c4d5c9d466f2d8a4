package dataplane

import (
	"net/netip"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// Applied returns the state the last sync applied (with what the safety
// valve held back kept), without computing it again; ok is false before
// the first sync. When that sync failed (SyncResult.Err), the virtual
// servers it names in SyncResult.Failed, and whatever another subsystem's
// error says, may not be in the kernel as described.
func (d *Dataplane) Applied() (st desired.State, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.applied == nil {
		return desired.State{}, false
	}
	return *d.applied, true
}

// SyncingSince returns when the running sync started; ok is false between
// syncs. The systemd watchdog stops being fed when a sync hangs.
func (d *Dataplane) SyncingSince() (start time.Time, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.syncStart, !d.syncStart.IsZero()
}

// Last returns the result of the latest sync.
func (d *Dataplane) Last() SyncResult {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// KernelSnapshotter is implemented by an IPVS applier that can hand out
// what it knows of the kernel, for status and metrics, without reading
// the kernel. The sync goroutine takes a snapshot after every sync; other
// goroutines read it and never touch the applier.
type KernelSnapshotter interface {
	Snapshot() ipvs.Snapshot
}

// kernelView returns the snapshot of the kernel the last sync published.
func (d *Dataplane) kernelView() ipvs.Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.kernel
}

// KernelConns returns the destinations' connection counts as of the last
// full reconcile; nil before the first sync.
func (d *Dataplane) KernelConns() map[lvs.Key]map[netip.AddrPort]ipvs.Conns {
	return d.kernelView().Conns()
}

// View is what status shows of the dataplane.
type View struct {
	Last    SyncResult
	Desired desired.State
	// Kernel holds each destination's weight in the kernel as of the last
	// sync (a running sync does not delay the view); a missing entry is
	// not in the kernel. It is nil before the first sync.
	Kernel map[lvs.Key]map[netip.AddrPort]int
}

// View returns the current desired state, the last sync and the kernel's
// weights as of that sync.
func (d *Dataplane) View() View {
	st, _, _, _ := d.desired()
	kernel := d.kernelView().Weights() // built outside the lock: 100,000 entries at scale
	d.mu.Lock()
	defer d.mu.Unlock()
	return View{Last: d.last, Desired: st, Kernel: kernel}
}

// Desired computes the desired state from the current inputs; ok is false
// until a configuration is set.
func (d *Dataplane) Desired() (desired.State, bool) {
	st, _, _, ok := d.desired()
	return st, ok
}
