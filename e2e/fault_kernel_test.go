//go:build e2e

package e2e

// The whole of lbd's kernel state, read back with the admin's tools
// (ipvsadm -Sn, ip addr, ipset save, iptables-save, ip6tables-save), and
// the same from `lbd plan`, in one comparable form; and the foreign
// objects a fault test puts beside lbd's, to prove they are not touched.

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// dataplaneView is lbd's part of a kernel, or what lbd plan asks for. Keys
// are "ipvs", "vips", "set NAME" (its create line, then its sorted
// members) and "TOOL TABLE chains", "TOOL TABLE CHAIN" (its rules in
// order), "TOOL TABLE jumps" (lbd's jumps from the built-in chains).
type dataplaneView map[string][]string

// ownSet tells lbd's ipsets from the foreign one the tests add.
func ownSet(name string) bool {
	return name != foreignSet && (strings.HasPrefix(name, "LBD-") || strings.HasPrefix(name, "LBD6-"))
}

// bareMember writes an ipset member as ipset save does: a /32 or /128
// net is printed as its address.
func bareMember(line string) string {
	f := strings.Fields(line)
	if len(f) < 3 {
		return line
	}
	parts := strings.Split(f[2], ",")
	for i, p := range parts {
		p = strings.TrimSuffix(p, "/32")
		parts[i] = strings.TrimSuffix(p, "/128")
	}
	f[2] = strings.Join(parts, ",")
	return strings.Join(f, " ")
}

// parsePlan reads the output of `lbd plan`.
func parsePlan(out string) dataplaneView {
	v := dataplaneView{}
	section, tool, table := "", "", ""
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "":
		case strings.HasPrefix(l, "# jump: "):
			jump := strings.TrimPrefix(l, "# jump: ")
			if rest, ok := strings.CutPrefix(jump, "-I "); ok {
				chain, rule, _ := strings.Cut(rest, " ")
				_, rule, _ = strings.Cut(rule, " ") // the position
				jump = "-A " + chain + " " + rule
			}
			v[tool+" "+table+" jumps"] = append(v[tool+" "+table+" jumps"], jump)
		case strings.HasPrefix(l, "# "):
			section = l
			tool = strings.Fields(strings.TrimPrefix(l, "# "))[0]
		case strings.HasPrefix(section, "# IPVS"):
			v["ipvs"] = append(v["ipvs"], l)
		case strings.HasPrefix(section, "# VIPs"):
			a := netip.MustParseAddr(l)
			v["vips"] = append(v["vips"], netip.PrefixFrom(a, a.BitLen()).String())
		case strings.HasPrefix(section, "# ipsets"):
			addSetLine(v, l)
		default: // iptables or ip6tables
			addRuleLine(v, tool, &table, l)
		}
	}
	return v.sorted()
}

func addSetLine(v dataplaneView, l string) {
	f := strings.Fields(l)
	if len(f) < 3 || !ownSet(f[1]) {
		return
	}
	key := "set " + f[1]
	if f[0] == "create" {
		// Name, type and family; ipset save adds its defaults after them.
		v[key] = append([]string{strings.Join(f[:min(len(f), 5)], " ")}, v[key]...)
		return
	}
	v[key] = append(v[key], bareMember(l))
}

func addRuleLine(v dataplaneView, tool string, table *string, l string) {
	switch {
	case strings.HasPrefix(l, "*"):
		*table = strings.TrimPrefix(l, "*")
	case strings.HasPrefix(l, ":LBD-"):
		chain, _, _ := strings.Cut(strings.TrimPrefix(l, ":"), " ")
		key := tool + " " + *table + " chains"
		v[key] = append(v[key], chain)
	case strings.HasPrefix(l, "-A LBD-"):
		chain := strings.Fields(l)[1]
		key := tool + " " + *table + " " + chain
		v[key] = append(v[key], l)
	case strings.HasPrefix(l, "-A ") && strings.Contains(l, " -j LBD-"):
		key := tool + " " + *table + " jumps"
		v[key] = append(v[key], l)
	}
}

// sorted sorts what has no order of its own: all but the chains' rules
// (whose creates come first in the sets).
func (v dataplaneView) sorted() dataplaneView {
	for k, lines := range v {
		switch {
		case k == "ipvs" || k == "vips" || strings.HasSuffix(k, " chains") || strings.HasSuffix(k, " jumps"):
			slices.Sort(lines)
		case strings.HasPrefix(k, "set "):
			if len(lines) > 1 {
				slices.Sort(lines[1:])
			}
		}
	}
	return v
}

// readDataplane reads lbd's part of the director's kernel; foreign IPVS
// lines (ipvsadm -Sn form) are left out.
func readDataplane(dir *topo.Director, foreignIPVS []string) (dataplaneView, error) {
	// The tools run side by side: each is a process of its own, and at the
	// fault tests' size ipvsadm and ipset take seconds under emulation.
	cmds := [][]string{{"ipvsadm", "-Sn"}, {"ip", "-o", "addr", "show", "dev", topo.VIPLink}, {"ipset", "save"}}
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter", "raw", "mangle"} {
			cmds = append(cmds, []string{tool + "-save", "-t", table})
		}
	}
	outs := make([]string, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for i, c := range cmds {
		wg.Go(func() { outs[i], errs[i] = dir.Exec(c...) })
	}
	wg.Wait()
	errs[1] = nil // no lbd0 yet: no VIPs
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	v := dataplaneView{"vips": vipsOf(outs[1])}
	for _, l := range sortedLines(outs[0]) {
		if !slices.Contains(foreignIPVS, l) {
			v["ipvs"] = append(v["ipvs"], l)
		}
	}
	for _, l := range strings.Split(outs[2], "\n") {
		addSetLine(v, strings.TrimSpace(l))
	}
	for i, c := range cmds[3:] {
		tool, table := strings.TrimSuffix(c[0], "-save"), c[2]
		for _, l := range strings.Split(outs[3+i], "\n") {
			addRuleLine(v, tool, &table, strings.TrimSpace(l))
		}
	}
	return v.sorted(), nil
}

// vipsOf reads the addresses of `ip -o addr show` (link-local left out).
func vipsOf(out string) []string {
	var addrs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "inet" || f[i] == "inet6") && !strings.HasPrefix(f[i+1], "fe80:") {
				addrs = append(addrs, f[i+1])
			}
		}
	}
	return addrs
}

// diff says how got differs from want, key by key, with at most a few
// lines of each difference; "" when they are the same.
func (v dataplaneView) diff(got dataplaneView) string {
	var b strings.Builder
	keys := slices.Sorted(maps.Keys(v))
	for k := range got {
		if _, ok := v[k]; !ok && len(got[k]) > 0 {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		w, g := v[k], got[k]
		if slices.Equal(w, g) {
			continue
		}
		missing, extra := lineDiff(w, g)
		fmt.Fprintf(&b, "%s: %d lines, want %d; missing %d %s; extra %d %s\n",
			k, len(g), len(w), len(missing), firstLines(missing), len(extra), firstLines(extra))
		if len(missing) == 0 && len(extra) == 0 {
			fmt.Fprintf(&b, "  same lines in another order:\n  got  %s\n  want %s\n", firstLines(g), firstLines(w))
		}
	}
	return b.String()
}

// lineDiff returns the lines of want not in got and of got not in want,
// counting repeats.
func lineDiff(want, got []string) (missing, extra []string) {
	n := map[string]int{}
	for _, l := range got {
		n[l]++
	}
	for _, l := range want {
		if n[l] > 0 {
			n[l]--
		} else {
			missing = append(missing, l)
		}
	}
	for _, l := range got {
		if n[l] > 0 {
			n[l]--
			extra = append(extra, l)
		}
	}
	return missing, extra
}

func firstLines(ls []string) string {
	if len(ls) > 4 {
		return fmt.Sprintf("%q ...", ls[:4])
	}
	return fmt.Sprintf("%q", ls)
}

// The foreign objects: an IPVS virtual server, an ipset whose name looks
// like lbd's, a rule in filter INPUT. Each fault test adds them before lbd
// first runs, and checks them at the end.
const (
	foreignSet    = "LBD-ALLOW"
	foreignVS     = "198.18.200.1:80"
	foreignMember = "198.18.201.1"
)

var foreignRule = []string{"INPUT", "-s", "198.18.202.1/32", "-p", "tcp", "-m", "tcp", "--dport", "22", "-j", "DROP"}

// foreign is what the foreign objects were when added.
type foreign struct {
	ipvs  []string // ipvsadm -Sn lines
	set   []string // ipset save lines of foreignSet
	rules []string // iptables-save -t filter lines with the rule
}

func addForeign(t *testing.T, dir *topo.Director) foreign {
	t.Helper()
	dir.MustExec(t, "ipvsadm", "-A", "-t", foreignVS, "-s", "rr")
	dir.MustExec(t, "ipvsadm", "-a", "-t", foreignVS, "-r", "198.19.255.1:80", "-m", "-w", "3")
	dir.MustExec(t, "ipset", "create", foreignSet, "hash:ip")
	dir.MustExec(t, "ipset", "add", foreignSet, foreignMember)
	dir.MustExec(t, append([]string{"iptables", "-A"}, foreignRule...)...)
	f, err := readForeign(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.ipvs) != 2 || len(f.set) != 2 || len(f.rules) != 1 {
		t.Fatalf("foreign objects: %+v", f)
	}
	return f
}

func readForeign(dir *topo.Director) (foreign, error) {
	var f foreign
	save, err := dir.Exec("ipvsadm", "-Sn")
	if err != nil {
		return f, err
	}
	for _, l := range sortedLines(save) {
		if strings.Contains(l, foreignVS) {
			f.ipvs = append(f.ipvs, l)
		}
	}
	set, err := dir.Exec("ipset", "save", foreignSet)
	if err != nil {
		return f, err
	}
	for _, l := range sortedLines(set) {
		// The create line's initval is random; its type and family are not.
		f.set = append(f.set, strings.Join(strings.Fields(l)[:min(3, len(strings.Fields(l)))], " "))
	}
	rules, err := dir.Exec("iptables-save", "-t", "filter")
	if err != nil {
		return f, err
	}
	for _, l := range strings.Split(rules, "\n") {
		if strings.Contains(l, foreignRule[2]) {
			f.rules = append(f.rules, strings.TrimSpace(l))
		}
	}
	return f, nil
}

// check reports how the foreign objects changed; "" when they did not.
func (f foreign) check(dir *topo.Director) string {
	now, err := readForeign(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, c := range []struct {
		what    string
		was, is []string
	}{{"foreign IPVS virtual server", f.ipvs, now.ipvs}, {"foreign ipset", f.set, now.set}, {"foreign iptables rule", f.rules, now.rules}} {
		if !slices.Equal(c.was, c.is) {
			fmt.Fprintf(&b, "%s changed: was %q, is %q\n", c.what, c.was, c.is)
		}
	}
	return b.String()
}
