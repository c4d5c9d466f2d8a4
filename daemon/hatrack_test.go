package daemon

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha"
)

func TestHATracker(t *testing.T) {
	fail, ok, wait := dataplane.SyncResult{Err: errors.New("netlink: busy")}, dataplane.SyncResult{}, dataplane.SyncResult{Waiting: true}
	web := func(healthy int) desired.State {
		return desired.State{Services: []desired.Service{{Name: "web", Healthy: healthy, Quorum: 2}, {Name: "dns", Healthy: 1, Quorum: 1}}}
	}
	for _, tt := range []struct {
		name    string
		inst    config.VRRPInstance
		syncs   []dataplane.SyncResult
		healthy []int
		want    string // the faults set, in order
	}{
		{"three failures in a row", config.VRRPInstance{Name: "o", TrackSyncs: 3}, []dataplane.SyncResult{fail, fail, wait, fail, ok},
			[]int{2, 2, 2, 2, 2}, "syncs failing=false syncs failing=false syncs failing=true syncs failing=false"},
		{"a success in between", config.VRRPInstance{Name: "o", TrackSyncs: 2}, []dataplane.SyncResult{fail, ok, fail},
			[]int{2, 2, 2}, "syncs failing=false syncs failing=false syncs failing=false"},
		{"not tracked", config.VRRPInstance{Name: "o"}, []dataplane.SyncResult{fail, fail, fail}, []int{0, 0, 0}, ""},
		{"quorum", config.VRRPInstance{Name: "o", TrackServices: []string{"dns", "web"}}, []dataplane.SyncResult{ok, ok, fail},
			[]int{2, 1, 2}, "tracked service below quorum=false tracked service below quorum=true tracked service below quorum=false"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			var st desired.State
			tr := &haTracker{instances: []config.VRRPInstance{tt.inst},
				set: func(name string, why ha.Fault, on bool) {
					if name != tt.inst.Name {
						t.Errorf("fault set on %q", name)
					}
					got = append(got, fmt.Sprintf("%s=%v", why, on))
				},
				applied: func() (desired.State, bool) { return st, true }}
			for i, r := range tt.syncs {
				st = web(tt.healthy[i])
				tr.onSync(r)
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("faults set: %q\nwant %q", g, tt.want)
			}
		})
	}
}
