package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/ha"
	"github.com/lbdproject/lbd/status"
)

const haBase = `
[[service]]
name = "web"
vips = ["198.18.100.10"]
port = 80
real_server = [{ address = "198.19.10.11" }]
`

const haInstance = `
[[vrrp]]
name = "outside"
interface = "eth0"
virtual_router_id = 51
priority = %d
addresses = ["198.18.2.10/24"]
services = ["web"]
garp_master_repeat = %d
garp_master_delay = "%s"
`

func haConfig(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

const haConntrackd = `
[ha.conntrackd]
interface = "eth1"
peer = "198.19.10.3"
snat_address = ["198.18.2.10"]
`

// TestVRRPWaitingStatus: until the first sync, status says why the box
// has not joined the election.
func TestVRRPWaitingStatus(t *testing.T) {
	d := &daemon{ha: ha.New(haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 5, "5s")), ha.Options{})}
	d.haWaiting.Store(true)
	var s status.Snapshot
	d.vrrpStatus(&s)
	if !strings.Contains(s.VRRPError, "joins the election after its first dataplane sync") {
		t.Errorf("waiting: VRRPError %q", s.VRRPError)
	}
	d.haWaiting.Store(false)
	s = status.Snapshot{}
	d.vrrpStatus(&s)
	if s.VRRPError != "" {
		t.Errorf("after the first sync: VRRPError %q", s.VRRPError)
	}
}

func TestSameVRRP(t *testing.T) {
	start := haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 5, "5s"))
	for _, tc := range []struct {
		name string
		text string
		same bool
	}{
		{"only services changed", strings.Replace(haBase, "80", "8080", 1) + fmt.Sprintf(haInstance, 150, 5, "5s"), true},
		{"the priority changed", haBase + fmt.Sprintf(haInstance, 100, 5, "5s"), false},
		{"VRRP removed", haBase, false},
		{"conntrackd added", haBase + fmt.Sprintf(haInstance, 150, 5, "5s") + haConntrackd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &daemon{vrrpStart: start}
			if got := d.sameVRRP(haConfig(t, tc.text)); got != tc.same {
				t.Errorf("sameVRRP = %v, want %v", got, tc.same)
			}
		})
	}
	// Where [ha.conntrackd] is written does not count.
	withCT := haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 5, "5s")+haConntrackd)
	d := &daemon{vrrpStart: withCT}
	if !d.sameVRRP(haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 5, "5s")+"\n\n"+haConntrackd)) {
		t.Errorf("moved [ha.conntrackd] is a change")
	}
	// Started without VRRP: adding it needs a restart too.
	d = &daemon{vrrpStart: haConfig(t, haBase)}
	if d.sameVRRP(start) {
		t.Errorf("adding [[vrrp]] on reload was taken")
	}
}

func TestGARPSchedule(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want string
	}{
		{"no pair: the announcer's default", haConfig(t, haBase), "[]"},
		{"keepalived's defaults", haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 5, "5s")), "[0s 10ms 20ms 30ms 40ms 5s 5.01s 5.02s 5.03s 5.04s]"},
		{"no second burst", haConfig(t, haBase+fmt.Sprintf(haInstance, 150, 2, "0s")), "[0s 10ms]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fmt.Sprint(garpSchedule(tc.cfg)); got != tc.want {
				t.Errorf("schedule %s, want %s", got, tc.want)
			}
		})
	}
}
