package ipset_test

import (
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/ipset/fakeipset"
)

// markState is a firewall-mark service lbd marks with mark on two ports.
func markState(t *testing.T, mark string, prev *desired.State) desired.State {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(`
[[service]]
name = "web"
fwmark = ` + mark + `
vips = ["192.0.2.10"]
ports = [80, 443]
health_check = { type = "none" }
real_server = [{ address = "10.0.0.1" }]
`)})
	if err != nil {
		t.Fatal(err)
	}
	return desired.Compute(desired.Input{Config: cfg, Prev: prev})
}

// TestMarkedEntries checks the skbinfo set: created with the extension (a
// set of its name without it is replaced), entries with their mark, and a
// mark that changes (the kernel holds an element once whatever its mark)
// written without an error, by a requested sync and a full one.
func TestMarkedEntries(t *testing.T) {
	k := &fakeipset.Kernel{}
	spec := desired.SetSpecs()[slicesIndex(t, "LBD-FWMARK")]
	plain := spec
	plain.SkbInfo = false
	if err := k.Create(plain); err != nil {
		t.Fatal(err)
	}
	a := ipset.New(k)
	st := markState(t, "7", nil)
	if _, err := a.Apply(&st, false); err != nil {
		t.Fatal(err)
	}
	if got := k.String(); !strings.Contains(got, "LBD-FWMARK: 192.0.2.10,tcp:80 skbmark 0x7 192.0.2.10,tcp:443 skbmark 0x7\n") || got != want(&st) {
		t.Errorf("after the first sync:\n%s\nwant:\n%s", got, want(&st))
	}
	if res, err := a.Apply(&st, true); err != nil || res.Writes != 0 {
		t.Errorf("full sync with nothing to change: %+v, %v; want no writes (the replaced set has skbinfo)", res, err)
	}
	for _, full := range []bool{false, true} {
		mark := map[bool]string{false: "8", true: "9"}[full]
		next := markState(t, mark, &st)
		res, err := a.Apply(&next, full)
		if err != nil || res.Writes != 4 {
			t.Errorf("mark %s (full %v): %+v, %v; want 2 deletes and 2 adds", mark, full, res, err)
		}
		if got := k.String(); got != want(&next) {
			t.Errorf("mark %s:\n%s\nwant:\n%s", mark, got, want(&next))
		}
		st = next
	}
	if ipset.ListedType(spec) != "hash:ip,port skbinfo" || ipset.ListedType(plain) != "hash:ip,port" {
		t.Errorf("listed types %q, %q", ipset.ListedType(spec), ipset.ListedType(plain))
	}
}

func slicesIndex(t *testing.T, name string) int {
	t.Helper()
	for i, s := range desired.SetSpecs() {
		if s.Name == name {
			return i
		}
	}
	t.Fatalf("no set %s", name)
	return -1
}
