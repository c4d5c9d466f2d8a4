package ipset_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/internal/testnetns"
)

func state(t *testing.T, weightedExtra string) desired.State {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(`
[dataplane]
local_networks = ["203.0.113.0/24"]
node_cidrs = ["198.51.100.0/24"]
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
snat = "always"
source_ranges = ["198.18.1.0/24"]
real_server = [{ address = "10.0.0.1", port = 8080 }` + weightedExtra + `]
[[service]]
name = "np"
vips = ["192.0.2.20"]
port = 443
node_port = 30443
real_server = [{ address = "10.0.0.2" }]
[[service]]
name = "v6"
vips = ["2001:db8::53"]
port = 53
protocol = "udp"
real_server = [{ address = "2001:db8:1::5" }]
`)})
	if err != nil {
		t.Fatal(err)
	}
	return desired.Compute(desired.Input{Config: cfg, HostAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}})
}

func TestApplyOnTheKernel(t *testing.T) {
	testnetns.Require(t, "ipset")
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := ipset.OpenKernelIn(h)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	testnetns.Run(t, ns, "ipset", "create", "THEIRS", "hash:ip")
	// An admin's set with a name like lbd's, which is not one of lbd's.
	testnetns.Run(t, ns, "ipset", "create", "LBD-ALLOW", "hash:ip")
	testnetns.Run(t, ns, "ipset", "add", "LBD-ALLOW", "198.18.0.1")
	testnetns.Run(t, ns, "ipset", "create", "LBD-VIPS", "hash:net") // wrong type: replaced
	a := ipset.New(k)
	specs := desired.SetSpecs()
	st := state(t, "")

	res, err := a.Apply(&st, false)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, es := range st.SetEntries() {
		total += len(es)
	}
	if res.Entries != total || res.Writes != 1+len(specs)+total {
		t.Errorf("first apply: %+v; want %d entries, %d writes (1 destroy, %d creates, one per entry)", res, total, 1+len(specs)+total, len(specs))
	}
	list := testnetns.Run(t, ns, "ipset", "list", "LBD-SRC-RANGES")
	if !strings.Contains(list, "192.0.2.10,tcp:80,198.18.1.0/24") || !strings.Contains(testnetns.Run(t, ns, "ipset", "list", "LBD6-SERVICES"), "2001:db8::53,udp:53") {
		t.Errorf("entries not in the kernel as ipset prints them:\n%s", list)
	}
	if !strings.Contains(testnetns.Run(t, ns, "ipset", "list", "LBD-VIPS"), "Type: hash:ip\n") {
		t.Errorf("LBD-VIPS of the wrong type was not replaced")
	}

	steps := []struct {
		name          string
		drift         []string
		st            desired.State
		full          bool
		dumps, writes int
	}{
		// Entries read back compare equal to what was written.
		{"full sync with nothing to change", nil, st, true, 1, 0},
		{"requested sync with nothing to change", nil, st, false, 0, 0},
		{"a real server added: hairpin and rs-net entries", nil, state(t, `, { address = "10.0.0.3" }`), false, 0, 2},
		{"a flushed set is refilled", []string{"ipset", "flush", "LBD-SERVICES"}, state(t, `, { address = "10.0.0.3" }`), true, 1, 3},
		{"a destroyed set is recreated", []string{"ipset", "destroy", "LBD-MASQ-ALL"}, state(t, `, { address = "10.0.0.3" }`), true, 1, 2},
		{"the real server removed again", nil, st, false, 0, 2},
	}
	for _, s := range steps {
		if s.drift != nil {
			testnetns.Run(t, ns, s.drift...)
		}
		res, err := a.Apply(&s.st, s.full)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if res.Dumps != s.dumps || res.Writes != s.writes {
			t.Errorf("%s: %+v; want %d dumps, %d writes", s.name, res, s.dumps, s.writes)
		}
	}

	done, err := ipset.Cleanup(k)
	if err != nil || len(done) != len(specs) {
		t.Errorf("cleanup: %d removed (%v), %v; want %d", len(done), done, err, len(specs))
	}
	if out := strings.Fields(testnetns.Run(t, ns, "ipset", "list", "-n")); !slices.Equal(slices.Sorted(slices.Values(out)), []string{"LBD-ALLOW", "THEIRS"}) {
		t.Errorf("after cleanup: %q; want only LBD-ALLOW and THEIRS", out)
	}
	if out := testnetns.Run(t, ns, "ipset", "list", "LBD-ALLOW"); !strings.Contains(out, "198.18.0.1") {
		t.Errorf("LBD-ALLOW lost its entry:\n%s", out)
	}
}
