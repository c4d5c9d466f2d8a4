package floating

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// fakeKernel holds addresses by link and records writes.
type fakeKernel struct {
	addrs  map[string][]netip.Prefix
	writes []string
	fail   string // a link whose reads fail
	strict bool   // deletes need the prefix as bound
}

func (k *fakeKernel) Addrs(link string) ([]netip.Prefix, error) {
	if link == k.fail {
		return nil, errors.New("no such link")
	}
	return slices.Clone(k.addrs[link]), nil
}

func (k *fakeKernel) Add(link string, p netip.Prefix) error {
	k.addrs[link] = append(k.addrs[link], p)
	k.writes = append(k.writes, "add "+link+" "+p.String())
	return nil
}

func (k *fakeKernel) Delete(link string, p netip.Prefix) error {
	if k.strict && !slices.Contains(k.addrs[link], p) {
		return errors.New("cannot assign requested address") // as the kernel, for another prefix length
	}
	k.addrs[link] = slices.DeleteFunc(k.addrs[link], func(q netip.Prefix) bool { return q == p })
	k.writes = append(k.writes, "del "+link+" "+p.String())
	return nil
}

func fl(prefix, link string, held bool) desired.Floating {
	return desired.Floating{Prefix: netip.MustParsePrefix(prefix), Link: link, Held: held}
}

func TestApply(t *testing.T) {
	own := netip.MustParsePrefix("198.18.3.2/24")
	for _, tc := range []struct {
		name   string
		before map[string][]netip.Prefix
		want   []desired.Floating
		writes string
	}{
		{"master binds", map[string][]netip.Prefix{"eth1": {own}},
			[]desired.Floating{fl("198.18.3.1/24", "eth1", false), fl("198.18.2.10/32", "eth0", false)},
			"add eth1 198.18.3.1/24,add eth0 198.18.2.10/32"},
		{"bound already: nothing written", map[string][]netip.Prefix{"eth1": {own, netip.MustParsePrefix("198.18.3.1/24")}},
			[]desired.Floating{fl("198.18.3.1/24", "eth1", false)}, ""},
		{"backup removes, whatever the prefix length", map[string][]netip.Prefix{"eth1": {own, netip.MustParsePrefix("198.18.3.1/32")}},
			[]desired.Floating{fl("198.18.3.1/24", "eth1", true)}, "del eth1 198.18.3.1/32"},
		{"backup leaves the box's own address", map[string][]netip.Prefix{"eth1": {own}},
			[]desired.Floating{fl("198.18.3.1/24", "eth1", true)}, ""},
		{"IPv6", map[string][]netip.Prefix{},
			[]desired.Floating{fl("2001:2:0:2::10/64", "eth0", false)}, "add eth0 2001:2:0:2::10/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &fakeKernel{addrs: tc.before}
			if _, err := New(k).Apply(tc.want, false); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(k.writes, ","); got != tc.writes {
				t.Errorf("writes %q, want %q", got, tc.writes)
			}
			if !slices.Contains(k.addrs["eth1"], own) && len(tc.before["eth1"]) > 0 {
				t.Errorf("the box's own address was removed: %v", k.addrs["eth1"])
			}
		})
	}
}

// Syncs that are not full write only on a change; a full one repairs
// drift; a failed link does not stop the others and is read again next time.
func TestApplyDriftAndFailure(t *testing.T) {
	k := &fakeKernel{addrs: map[string][]netip.Prefix{}}
	a := New(k)
	want := []desired.Floating{fl("198.18.3.1/24", "eth1", false)}
	a.Apply(want, false)
	k.addrs["eth1"] = nil // someone removed it
	if st, _ := a.Apply(want, false); st.Dumps != 0 {
		t.Errorf("an unchanged partial sync read the kernel: %+v", st)
	}
	if st, _ := a.Apply(want, true); st.Writes != 1 || len(k.addrs["eth1"]) != 1 {
		t.Errorf("the full sync did not repair: %+v, %v", st, k.addrs)
	}
	k.fail = "eth9"
	both := append(want, fl("198.18.2.10/32", "eth9", false), fl("198.18.2.11/32", "eth0", false))
	if _, err := a.Apply(both, false); err == nil || !strings.Contains(err.Error(), "eth9") {
		t.Errorf("error %v, want one naming eth9", err)
	}
	if len(k.addrs["eth0"]) != 1 {
		t.Errorf("eth0 not bound after eth9 failed: %v", k.addrs)
	}
	k.fail = ""
	if st, _ := a.Apply(both, false); st.Dumps == 0 {
		t.Errorf("after a failure, the same state was not applied again: %+v", st)
	}
}

// TestApplyChangeWithoutReading: a sync that is not full, after one that
// succeeded, writes a takeover's or a step-down's change without reading
// the links; an address new to the applier, or a write the kernel
// refuses, makes it read the link and repair.
func TestApplyChangeWithoutReading(t *testing.T) {
	master := []desired.Floating{fl("198.18.3.1/24", "eth1", false), fl("198.18.2.10/32", "eth0", false)}
	backup := []desired.Floating{fl("198.18.3.1/24", "eth1", true), fl("198.18.2.10/32", "eth0", true)}
	k := &fakeKernel{addrs: map[string][]netip.Prefix{}}
	a := New(k)
	steps := []struct {
		name          string
		want          []desired.Floating
		dumps, writes int
	}{
		{"first: read", backup, 2, 0},
		{"takeover", master, 0, 2},
		{"step-down", backup, 0, 2},
		{"a new address: its link is read", append(slices.Clone(backup), fl("198.18.4.1/24", "eth2", false)), 1, 1},
	}
	for _, s := range steps {
		st, err := a.Apply(s.want, false)
		if err != nil || st.Dumps != s.dumps || st.Writes != s.writes {
			t.Errorf("%s: %+v, %v; want %d dumps, %d writes", s.name, st, err, s.dumps, s.writes)
		}
	}
	if got := len(k.addrs["eth1"]) + len(k.addrs["eth0"]); got != 0 {
		t.Errorf("held addresses still bound: %v", k.addrs)
	}
	// Bound by hand as /32 meanwhile: deleting the /24 fails, the link is
	// read and the address removed as it is.
	k.addrs["eth1"] = []netip.Prefix{netip.MustParsePrefix("198.18.3.1/32")}
	k.strict = true
	a.Apply(master[:1], false)
	k.addrs["eth1"] = []netip.Prefix{netip.MustParsePrefix("198.18.3.1/32")}
	if st, err := a.Apply(backup[:1], false); err != nil || st.Dumps != 1 || len(k.addrs["eth1"]) != 0 {
		t.Errorf("a refused delete: %+v, %v, eth1 %v; want the link read and the /32 removed", st, err, k.addrs["eth1"])
	}
}
