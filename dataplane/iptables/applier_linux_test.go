package iptables_test

import (
	"errors"
	"fmt"
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
	if st.Dumps != 3 || st.Writes != 3 {
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
	if len(done) != 3 || !strings.HasPrefix(done[0], "iptables nat chains LBD-") || !strings.HasPrefix(done[1], "iptables filter chains LBD-") ||
		!strings.HasPrefix(done[2], "iptables raw chains LBD-") {
		t.Errorf("cleanup removed %q; want one line per table, naming the tool", done)
	}
	for _, table := range []string{"nat", "filter", "raw"} {
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
	done, err := iptables.Cleanup(iptables.NewExecRunner(6, iptables.Detect()).InNetns(ns), tables)
	if err != nil || len(done) != 3 || !strings.HasPrefix(done[0], "ip6tables nat chains LBD-") {
		t.Errorf("cleanup: %q, %v; want one line per table, naming ip6tables", done, err)
	}
}

// TestRefusedRuleIsNamed feeds each backend a table whose last rule it
// refuses, after hundreds of good ones: the error names that rule (or,
// when iptables-legacy learns of the kernel's refusal only at COMMIT,
// that line), and quotes nothing else of the input.
func TestRefusedRuleIsNamed(t *testing.T) {
	ns, _ := setup(t)
	table := func(name, bad string) desired.Table {
		tb := desired.Table{Name: name, Chains: []string{"LBD-TEST"}}
		for i := range 300 {
			tb.Rules = append(tb.Rules, fmt.Sprintf("-A LBD-TEST -s 198.18.%d.%d/32 -j RETURN", i/250, 1+i%250))
		}
		tb.Rules = append(tb.Rules, bad)
		return tb
	}
	noSet := "-A LBD-TEST -m set --match-set LBD-NO-SUCH-SET src -j ACCEPT"
	reject := "-A LBD-TEST -j REJECT --reject-with icmp-port-unreachable" // not in nat: the kernel refuses it
	// The input: *table, the chain, 300 rules, the bad one (303), COMMIT.
	tests := []struct {
		backend iptables.Backend
		table   desired.Table
		line    int
		text    string
	}{
		{iptables.NFT, table("filter", noSet), 303, noSet},
		{iptables.Legacy, table("filter", noSet), 303, noSet},
		{iptables.NFT, table("nat", reject), 303, reject},
		{iptables.Legacy, table("nat", reject), 304, "COMMIT (the kernel refused"},
	}
	for _, tt := range tests {
		t.Run(string(tt.backend)+" "+tt.table.Name, func(t *testing.T) {
			r, err := iptables.LookupRunner(4, tt.backend)
			if err != nil || !strings.Contains(r.String(), string(tt.backend)) {
				t.Skipf("no %s tools: %v", tt.backend, err)
			}
			_, err = iptables.New(r.InNetns(ns)).Apply([]desired.Table{tt.table}, true)
			var re *iptables.RestoreError
			if !errors.As(err, &re) {
				t.Fatalf("error %v; want a RestoreError", err)
			}
			msg := err.Error()
			if re.Line != tt.line || !strings.HasPrefix(re.Text, tt.text) || !strings.Contains(msg, fmt.Sprintf("[input line %d: %s", tt.line, tt.text)) {
				t.Errorf("line %d %q: %s", re.Line, re.Text, msg)
			}
			if len(msg) > 600 || strings.Contains(msg, "198.18.0.1/32") || strings.Contains(msg, "\n") {
				t.Errorf("error of %d bytes, quoting more than the refused rule:\n%s", len(msg), msg)
			}
			t.Logf("%d bytes: %s", len(msg), msg)
		})
	}
}

// A failover pair's rules (VRRP, multicast and unicast; IPVS sync from the
// peer only) are written as iptables-save prints them, in both families:
// a second full apply writes nothing.
func TestPairRulesInSavedForm(t *testing.T) {
	testnetns.Require(t, "ip6tables-restore", "ipset")
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(`
[[service]]
name = "web"
vips = ["198.18.100.1"]
port = 80
real_server = [{ address = "198.18.3.11" }]
[[vrrp]]
name = "o4"
interface = "eth0"
virtual_router_id = 51
addresses = ["198.18.2.10/24"]
services = ["web"]
[[vrrp]]
name = "o6"
interface = "eth0"
virtual_router_id = 51
unicast_peers = ["2001:2:0:2::3"]
addresses = ["2001:2:0:2::10/64"]
[ha.ipvs_sync]
interface = "eth1"
peer = "198.18.3.2"
[ha.conntrackd]
snat_address = ["198.18.2.10", "2001:2:0:2::10"]
`)})
	if err != nil {
		t.Fatal(err)
	}
	ns := testnetns.New(t)
	for _, s := range desired.SetSpecs() {
		fam := "inet"
		if s.Family == 6 {
			fam = "inet6"
		}
		testnetns.Run(t, ns, "ipset", "create", s.Name, string(s.Type), "family", fam)
	}
	for _, fam := range []int{4, 6} {
		a := iptables.New(iptables.NewExecRunner(fam, iptables.Detect()).InNetns(ns))
		tables := desired.TablesFor(cfg, fam)
		if _, err := a.Apply(tables, true); err != nil {
			t.Fatal(err)
		}
		if st, err := a.Apply(tables, true); err != nil || st.Writes != 0 {
			t.Errorf("IPv%d: second full apply: %+v, %v; want no writes (rules in saved form)", fam, st, err)
		}
	}
	saved := testnetns.Run(t, ns, "iptables-save") + testnetns.Run(t, ns, "ip6tables-save")
	for _, want := range []string{
		"-A LBD-INPUT -s 198.18.3.2/32 -i eth1 -p udp -m udp --dport 3780 -j ACCEPT",
		"-A LBD-INPUT -i eth1 -p udp -m udp --dport 3780 -j DROP",
		"-A LBD-POSTROUTING -o eth0 -j SNAT --to-source 198.18.2.10 --random-fully\n-A LBD-POSTROUTING -j MASQUERADE --random-fully",
		"-A LBD-POSTROUTING -o eth0 -j SNAT --to-source 2001:2:0:2::10 --random-fully\n-A LBD-POSTROUTING -j MASQUERADE --random-fully",
		"-A LBD-INPUT -d 224.0.0.18/32 -i eth0 -p vrrp -j ACCEPT",
		"-A LBD-INPUT -s 2001:2:0:2::3/128 -i eth0 -p vrrp -j ACCEPT",
		"-A LBD-INPUT -s 198.18.3.2/32 -d 224.0.0.81/32 -i eth1 -p udp -m udp --dport 8848 -j ACCEPT",
		"-A LBD-INPUT -d 224.0.0.81/32 -i eth1 -p udp -m udp --dport 8848 -j DROP",
	} {
		if !strings.Contains(saved, want) {
			t.Errorf("no %q in:\n%s", want, saved)
		}
	}
}
