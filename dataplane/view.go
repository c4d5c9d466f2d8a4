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

// KernelWeigher is implemented by an IPVS applier that can say what the
// kernel holds without reading it.
type KernelWeigher interface {
	KernelWeights() map[lvs.Key]map[netip.AddrPort]int
}

// ConnCounter is implemented by an IPVS applier that keeps the connection
// counts of its last full dump.
type ConnCounter interface {
	KernelConns() map[lvs.Key]map[netip.AddrPort]ipvs.Conns
}

// KernelConns returns the destinations' connection counts as of the last
// full reconcile; nil before one ran, or when a sync runs for longer than
// viewWait.
func (d *Dataplane) KernelConns() map[lvs.Key]map[netip.AddrPort]ipvs.Conns {
	cc, ok := d.apply.ipvs.(ConnCounter)
	if !ok || !d.waitIdle(viewWait) {
		return nil
	}
	defer d.idle()
	return cc.KernelConns()
}

// kernelWeights returns the IPVS applier's view of the kernel's weights,
// copied when asked (status) rather than after every sync; nil when a sync
// runs for longer than viewWait.
func (d *Dataplane) kernelWeights() map[lvs.Key]map[netip.AddrPort]int {
	kw, ok := d.apply.ipvs.(KernelWeigher)
	if !ok || !d.waitIdle(viewWait) {
		return nil
	}
	defer d.idle()
	return kw.KernelWeights()
}

// viewWait bounds how long status waits for a running sync (a cold sync of
// 10,000 services takes tens of seconds; lbd status gives up after 10).
const viewWait = 3 * time.Second

// waitIdle takes the appliers for the caller, waiting at most max for a
// running sync; idle gives them back.
func (d *Dataplane) waitIdle(max time.Duration) bool {
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case d.applying <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

func (d *Dataplane) idle() { <-d.applying }

// View is what status shows of the dataplane.
type View struct {
	Last    SyncResult
	Desired desired.State
	// Kernel holds each destination's weight in the kernel as of the last
	// sync; a missing entry is not in the kernel. It is nil when unknown:
	// before the first sync, or while a long sync runs.
	Kernel map[lvs.Key]map[netip.AddrPort]int
}

// View returns the current desired state, the last sync and the kernel's
// weights as of that sync.
func (d *Dataplane) View() View {
	st, _, _ := d.desired()
	kernel := d.kernelWeights()
	d.mu.Lock()
	defer d.mu.Unlock()
	return View{Last: d.last, Desired: st, Kernel: kernel}
}

// Desired computes the desired state from the current inputs; ok is false
// until a configuration is set.
func (d *Dataplane) Desired() (desired.State, bool) {
	st, _, ok := d.desired()
	return st, ok
}
