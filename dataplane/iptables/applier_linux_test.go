package iptables_test

import (
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// setup returns a namespace holding lbd's IPv4 sets (the rules refer to
// them) and a runner in it.
func setup(t *testing.T) (string, *iptables.ExecRunner) {
	t.Helper()
	testnetns.Require(t, "iptables-restore", "ipset")
	ns := testnetns.New(t)
	for _, s := range desired.SetSpecs() {
		if s.Family == 4 {
			testnetns.Run(t, ns, "ipset", "create", s.Name, string(s.Type))
		}
	}
	return ns, iptables.NewExecRunner(4, iptables.Detect()).InNetns(ns)
}

// lbdRules returns the lines of iptables-save that are lbd's.
func lbdRules(t *testing.T, ns, table string) []string {
	t.Helper()
	var out []string
	for _, l := range strings.Split(testnetns.Run(t, ns, "iptables-save", "-t", table), "\n") {
		if strings.Contains(l, "LBD-") {
			out = append(out, l)
		}
	}
	return out
}

func TestApplyRepairsAndWritesOnlyWhatDiffers(t *testing.T) {
	ns, r := setup(t)
	dp := config.Defaults().Dataplane
	tables := desired.Tables(dp, 4)
	a := iptables.New(r)

	st, err := a.Apply(tables, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dumps != 2 || st.Writes != 2 {
		t.Errorf("first apply: %+v; want a dump and a write per table", st)
	}
	golden := map[string][]string{"nat": lbdRules(t, ns, "nat"), "filter": lbdRules(t, ns, "filter")}
	if len(golden["nat"]) != 3+3+9 || len(golden["filter"]) != 3+2+9 {
		t.Fatalf("rules after apply:\nnat %q\nfilter %q", golden["nat"], golden["filter"])
	}

	testnetns.Run(t, ns, "iptables", "-N", "THEIRS")
	testnetns.Run(t, ns, "iptables", "-A", "THEIRS", "-j", "ACCEPT")
	steps := []struct {
		name   string
		drift  []string
		full   bool
		writes int
	}{
		// The rules are written as iptables-save prints them: a dump of
		// what was written compares equal, so nothing is rewritten.
		{"full sync with nothing to change", nil, true, 0},
		{"requested sync with unchanged rules reads nothing", nil, false, 0},
		{"a flushed chain", []string{"iptables", "-F", "LBD-INPUT"}, true, 1},
		{"a deleted jump", []string{"iptables", "-t", "nat", "-D", "POSTROUTING", "-m", "comment", "--comment", "lbd", "-j", "LBD-POSTROUTING"}, true, 1},
		{"a firewall rule inserted above the INPUT jump", []string{"iptables", "-I", "INPUT", "1", "-s", "192.0.2.99", "-j", "DROP"}, true, 1},
		{"a deleted chain (jump and rules gone)", []string{"sh", "-c", "iptables -D FORWARD -m comment --comment lbd -j LBD-FORWARD && iptables -F LBD-FORWARD && iptables -X LBD-FORWARD"}, true, 1},
	}
	for _, s := range steps {
		if s.drift != nil {
			testnetns.Run(t, ns, s.drift...)
		}
		st, err := a.Apply(tables, s.full)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if st.Writes != s.writes {
			t.Errorf("%s: %d writes; want %d", s.name, st.Writes, s.writes)
		}
		for table, want := range golden {
			if got := lbdRules(t, ns, table); strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s: %s table:\n%s\nwant:\n%s", s.name, table, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
	}
	filter := testnetns.Run(t, ns, "iptables-save", "-t", "filter")
	if !strings.Contains(filter, "-A INPUT -m comment --comment lbd -j LBD-INPUT\n-A INPUT -s 192.0.2.99/32 -j DROP") {
		t.Errorf("lbd's jump is not first in INPUT, or the firewall's rule is gone:\n%s", filter)
	}

	done, err := iptables.Cleanup(r, tables)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 2 {
		t.Errorf("cleanup removed %v", done)
	}
	for _, table := range []string{"nat", "filter"} {
		if got := lbdRules(t, ns, table); len(got) != 0 {
			t.Errorf("after cleanup, %s still has %q", table, got)
		}
	}
	if after := testnetns.Run(t, ns, "iptables-save", "-t", "filter"); !strings.Contains(after, "-A THEIRS -j ACCEPT") || !strings.Contains(after, "-A INPUT -s 192.0.2.99/32 -j DROP") {
		t.Errorf("cleanup touched rules that are not lbd's:\n%s", after)
	}
}

func TestIPv6Tables(t *testing.T) {
	testnetns.Require(t, "ip6tables-restore", "ipset")
	ns := testnetns.New(t)
	for _, s := range desired.SetSpecs() {
		if s.Family == 6 {
			testnetns.Run(t, ns, "ipset", "create", s.Name, string(s.Type), "family", "inet6")
		}
	}
	a := iptables.New(iptables.NewExecRunner(6, iptables.Detect()).InNetns(ns))
	tables := desired.Tables(config.Defaults().Dataplane, 6)
	if _, err := a.Apply(tables, true); err != nil {
		t.Fatal(err)
	}
	if st, err := a.Apply(tables, true); err != nil || st.Writes != 0 {
		t.Errorf("second full apply: %+v, %v; want no writes (rules in saved form)", st, err)
	}
}
