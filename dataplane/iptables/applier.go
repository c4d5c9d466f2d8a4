// Package iptables keeps lbd's iptables and ip6tables rules in place: a
// fixed set of LBD-* chains, each reached by one jump from a built-in
// chain, written with one iptables-restore --noflush per table and only
// when a dump shows they differ. Rules of other chains are never touched.
package iptables

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// Runner runs one family's iptables tools.
type Runner interface {
	// Save returns iptables-save output for one table.
	Save(table string) (string, error)
	// Restore feeds input to iptables-restore --noflush.
	Restore(input string) error
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps  int
	Writes int
	// Rules is how many rules lbd has in the tables (its chains and
	// jumps): it does not grow with services.
	Rules int
}

// Applier applies one family's tables.
type Applier struct {
	r Runner
	// applied is the restore input of the tables as last written or found
	// correct; a requested sync with the same tables writes nothing.
	applied map[string]string
}

// New returns an Applier over r.
func New(r Runner) *Applier { return &Applier{r: r} }

// Apply makes the tables hold lbd's chains and jumps. With full (or
// before the first success) it dumps each table and repairs what differs;
// otherwise it writes only tables whose desired rules changed.
func (a *Applier) Apply(tables []desired.Table, full bool) (Stats, error) {
	var st Stats
	var errs []error
	if a.applied == nil {
		a.applied = map[string]string{}
		full = true
	}
	for _, t := range tables {
		st.Rules += len(t.Rules) + len(t.Jumps)
		want := desired.RestoreInput(t)
		if !full && a.applied[t.Name] == want {
			continue
		}
		dump, err := a.r.Save(t.Name)
		st.Dumps++
		if err != nil {
			errs = append(errs, fmt.Errorf("reading table %s: %w", t.Name, err))
			delete(a.applied, t.Name)
			continue
		}
		input := repair(t, parseSave(dump))
		if input == "" {
			a.applied[t.Name] = want
			continue
		}
		st.Writes++
		if err := a.r.Restore(input); err != nil {
			errs = append(errs, fmt.Errorf("writing table %s: %w", t.Name, err))
			delete(a.applied, t.Name)
			continue
		}
		a.applied[t.Name] = want
	}
	return st, errors.Join(errs...)
}

// saved is one table as iptables-save printed it: the rules of each chain
// in order, and which chains exist.
type saved struct {
	chains map[string]bool
	rules  map[string][]string // chain -> rule specs without "-A CHAIN "
}

func parseSave(dump string) saved {
	s := saved{chains: map[string]bool{}, rules: map[string][]string{}}
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			s.chains[name] = true
		case strings.HasPrefix(line, "-A "):
			chain, spec, _ := strings.Cut(line[3:], " ")
			s.rules[chain] = append(s.rules[chain], spec)
		}
	}
	return s
}

// repair returns the iptables-restore input that makes the saved table
// hold t, or "" when it already does.
func repair(t desired.Table, s saved) string {
	var b strings.Builder
	rewrite := false
	wantRules := map[string][]string{}
	for _, r := range t.Rules {
		chain, spec, _ := strings.Cut(strings.TrimPrefix(r, "-A "), " ")
		wantRules[chain] = append(wantRules[chain], spec)
	}
	for _, c := range t.Chains {
		if !s.chains[c] || !slices.Equal(s.rules[c], wantRules[c]) {
			rewrite = true
		}
	}
	var jumps []string
	for _, j := range t.Jumps {
		rules := s.rules[j.From]
		at := slices.Index(rules, j.Rule())
		// A jump that is missing, duplicated, or no longer first when it
		// must be (a firewall inserted rules above it) is put back.
		if at >= 0 && (!j.First || at == 0) && count(rules, j.Rule()) == 1 {
			continue
		}
		for range count(rules, j.Rule()) {
			jumps = append(jumps, fmt.Sprintf("-D %s %s", j.From, j.Rule()))
		}
		if j.First {
			jumps = append(jumps, fmt.Sprintf("-I %s 1 %s", j.From, j.Rule()))
		} else {
			jumps = append(jumps, fmt.Sprintf("-A %s %s", j.From, j.Rule()))
		}
	}
	if !rewrite && len(jumps) == 0 {
		return ""
	}
	fmt.Fprintf(&b, "*%s\n", t.Name)
	if rewrite {
		// Declaring a chain in --noflush input flushes it; the rules follow.
		for _, c := range t.Chains {
			fmt.Fprintf(&b, ":%s - [0:0]\n", c)
		}
		for _, r := range t.Rules {
			b.WriteString(r + "\n")
		}
	}
	for _, j := range jumps {
		b.WriteString(j + "\n")
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func count(rules []string, r string) int {
	n := 0
	for _, x := range rules {
		if x == r {
			n++
		}
	}
	return n
}

// toolNamer is a Runner that names its tool (iptables or ip6tables), for
// Cleanup's lines.
type toolNamer interface {
	Tool() string
}

// Cleanup removes lbd's jumps and chains from the tables and nothing else.
// It returns what it removed, one line per table, naming the tool when the
// runner names it ("iptables nat chains LBD-SERVICES, ...").
func Cleanup(r Runner, tables []desired.Table) ([]string, error) {
	var done []string
	var errs []error
	tool := ""
	if n, ok := r.(toolNamer); ok {
		tool = n.Tool() + " "
	}
	for _, t := range tables {
		dump, err := r.Save(t.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading table %s: %w", t.Name, err))
			continue
		}
		s := parseSave(dump)
		var b strings.Builder
		fmt.Fprintf(&b, "*%s\n", t.Name)
		n := 0
		for _, j := range t.Jumps {
			for range count(s.rules[j.From], j.Rule()) {
				fmt.Fprintf(&b, "-D %s %s\n", j.From, j.Rule())
				n++
			}
		}
		var chains []string
		for _, c := range t.Chains {
			if s.chains[c] {
				fmt.Fprintf(&b, ":%s - [0:0]\n", c) // flush first: rules may jump between lbd chains
				chains = append(chains, c)
			}
		}
		for _, c := range chains {
			fmt.Fprintf(&b, "-X %s\n", c)
		}
		if n == 0 && len(chains) == 0 {
			continue
		}
		b.WriteString("COMMIT\n")
		if err := r.Restore(b.String()); err != nil {
			errs = append(errs, fmt.Errorf("cleaning table %s: %w", t.Name, err))
			continue
		}
		if len(chains) > 0 {
			done = append(done, fmt.Sprintf("%s%s chains %s", tool, t.Name, strings.Join(chains, ", ")))
		}
	}
	return done, errors.Join(errs...)
}
