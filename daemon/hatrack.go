package daemon

import (
	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha"
)

// haTracker turns the dataplane's syncs into the faults of the instances
// that track them (track_syncs, track_services). Its state is the sync
// goroutine's.
type haTracker struct {
	instances []config.VRRPInstance
	set       func(instance string, why ha.Fault, on bool)
	applied   func() (desired.State, bool)
	failed    int // syncs failed in a row
}

// onSync is a dataplane hook.
func (t *haTracker) onSync(r dataplane.SyncResult) {
	if r.Waiting {
		return // nothing was tried
	}
	if r.Err != nil {
		t.failed++
	} else {
		t.failed = 0
	}
	var below map[string]bool
	if st, ok := t.applied(); ok {
		below = belowQuorum(st)
	}
	for i := range t.instances {
		v := &t.instances[i]
		if v.TrackSyncs > 0 {
			t.set(v.Name, ha.FaultSyncs, t.failed >= v.TrackSyncs)
		}
		if len(v.TrackServices) > 0 && below != nil {
			fault := false
			for _, s := range v.TrackServices {
				fault = fault || below[s]
			}
			t.set(v.Name, ha.FaultQuorum, fault)
		}
	}
}

// belowQuorum names the services with fewer healthy real servers than
// their quorum.
func belowQuorum(st desired.State) map[string]bool {
	out := map[string]bool{}
	for _, vs := range st.Services {
		if vs.Healthy < max(vs.Quorum, 1) {
			out[vs.Name] = true
		}
	}
	return out
}
