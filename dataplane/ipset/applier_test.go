package ipset_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/ipset/fakeipset"
)

// randomState makes a small configuration in which entries are shared in
// every way the sets allow: VIPs by several ports, real servers by several
// services, host addresses by firewalled services.
func randomState(t *testing.T, r *rand.Rand, prev *desired.State) desired.State {
	t.Helper()
	var b strings.Builder
	b.WriteString("[dataplane]\nnode_cidrs = [\"198.51.100.0/24\"]\n")
	if r.IntN(3) == 0 {
		b.WriteString("local_networks = [\"203.0.113.0/24\"]\n")
	}
	if r.IntN(4) == 0 {
		b.WriteString("real_server_networks = [\"10.0.0.0/24\"]\n")
	}
	for i := range r.IntN(7) {
		fmt.Fprintf(&b, "[[service]]\nname = \"s%d\"\nvips = [\"192.0.2.%d\"]\nport = %d\nsnat = %q\nprotocol = %q\n", i, 1+r.IntN(3), 80+i,
			[]string{"auto", "always", "never"}[r.IntN(3)], []string{"tcp", "tcp", "udp", "sctp"}[r.IntN(4)])
		if r.IntN(3) == 0 {
			fmt.Fprintf(&b, "node_port = %d\n", 30000+i)
		}
		if r.IntN(3) == 0 {
			fmt.Fprintf(&b, "source_ranges = [\"198.18.%d.0/24\"]\n", r.IntN(2))
		}
		for _, j := range r.Perm(4)[:r.IntN(4)] {
			fmt.Fprintf(&b, "[[service.real_server]]\naddress = \"10.0.0.%d\"\nport = %d\nweight = %d\n", j+1, 8080+r.IntN(2), 1+r.IntN(3))
		}
	}
	b.WriteString("[[service]]\nname = \"v6\"\nvips = [\"2001:db8::1\"]\nport = 53\nprotocol = \"udp\"\n")
	b.WriteString("real_server = [{ address = \"2001:db8:1::5\" }]\n")
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(b.String())})
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	pool := []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("198.51.100.8"), netip.MustParseAddr("2001:db8:ff::1")}
	var host []netip.Addr
	for _, a := range pool {
		if r.IntN(2) == 0 {
			host = append(host, a)
		}
	}
	return desired.Compute(desired.Input{Config: cfg, HostAddrs: host, Prev: prev})
}

// want renders what the kernel should hold for st, as fakeipset prints it.
func want(st *desired.State) string {
	sets := st.SetEntries()
	var b strings.Builder
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range sets {
			if !yield(n) {
				return
			}
		}
	}) {
		if len(sets[name]) == 0 {
			continue
		}
		var es []string
		for _, e := range slices.SortedFunc(slices.Values(sets[name]), desired.SetEntry.Compare) {
			es = append(es, e.String())
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(es, " "))
	}
	return b.String()
}

// TestApplyChangesMatchesFull drives the applier through random states,
// mostly with requested (incremental) syncs, and requires the kernel to hold
// exactly each state's entries after every step: the counts must follow
// shared entries through every kind of change.
func TestApplyChangesMatchesFull(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 1))
		k := &fakeipset.Kernel{}
		a := ipset.New(k)
		var prev *desired.State
		for step := range 60 {
			st := randomState(t, r, prev)
			full := r.IntN(8) == 0
			res, err := a.Apply(&st, full)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if got, want := k.String(), want(&st); got != want {
				t.Fatalf("seed %d step %d (full %v): kernel\n%s\nwant\n%s", seed, step, full, got, want)
			}
			total := 0
			for _, n := range a.Counts() {
				total += n
			}
			if res.Entries != total {
				t.Fatalf("seed %d step %d: %d entries, counts say %d", seed, step, res.Entries, total)
			}
			// The same state again writes nothing.
			if res, err := a.Apply(&st, false); err != nil || res.Writes != 0 || res.Dumps != 0 {
				t.Fatalf("seed %d step %d: unchanged state: %+v, %v", seed, step, res, err)
			}
			prev = &st
		}
	}
}

func TestApplyRepairsAndRecovers(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	k := &fakeipset.Kernel{}
	a := ipset.New(k)
	st := randomState(t, r, nil)
	for len(st.Services) < 3 {
		st = randomState(t, r, nil)
	}
	if _, err := a.Apply(&st, false); err != nil {
		t.Fatal(err)
	}
	// Drift is not seen by a requested sync, and repaired by a full one.
	k.Flush("LBD-SERVICES")
	if res, _ := a.Apply(&st, false); res.Writes != 0 {
		t.Errorf("requested sync wrote %d: it trusts its counts", res.Writes)
	}
	res, err := a.Apply(&st, true)
	if err != nil || res.Dumps != 1 || res.Writes == 0 || k.String() != want(&st) {
		t.Errorf("full sync after a flush: %+v, %v\n%s", res, err, k)
	}
	// A failed write makes the next sync a full one.
	if err := k.Destroy("LBD-SERVICES"); err != nil {
		t.Fatal(err)
	}
	next := randomState(t, r, &st)
	for want(&next) == want(&st) || !strings.Contains(want(&next), "LBD-SERVICES:") {
		next = randomState(t, r, &st)
	}
	if _, err := a.Apply(&next, false); err == nil && k.String() != want(&next) {
		t.Fatalf("no error, yet the kernel differs")
	}
	res, err = a.Apply(&next, false)
	if err != nil || k.String() != want(&next) {
		t.Errorf("after a failed sync: %+v, %v\n%s\nwant\n%s", res, err, k, want(&next))
	}
}

func TestOnlyLbdsOwnSetsAreTouched(t *testing.T) {
	k := &fakeipset.Kernel{}
	// An admin's sets: LBD-ALLOW looks like lbd's but is not one of its
	// names, and is used by the admin's own rules.
	for _, name := range []string{"LBD-ALLOW", "LBD6-ALLOW", "THEIRS"} {
		if err := k.Create(desired.SetSpec{Name: name, Type: desired.HashIP, Family: 4}); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.Add("LBD-ALLOW", desired.SetEntry{IP: netip.MustParseAddr("198.18.0.1")}); err != nil {
		t.Fatal(err)
	}
	st := randomState(t, rand.New(rand.NewPCG(3, 3)), nil)
	a := ipset.New(k)
	for _, full := range []bool{false, true} {
		if _, err := a.Apply(&st, full); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(k.String(), "LBD-ALLOW: 198.18.0.1\n") {
		t.Errorf("a sync touched LBD-ALLOW:\n%s", k)
	}
	done, err := ipset.Cleanup(k)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != int(desired.NumSets) {
		t.Errorf("cleanup removed %d sets (%v); want lbd's %d", len(done), done, desired.NumSets)
	}
	for _, name := range []string{"LBD-ALLOW", "LBD6-ALLOW", "THEIRS"} {
		if !k.Has(name) {
			t.Errorf("cleanup destroyed %s, which is not lbd's", name)
		}
	}
	for _, s := range desired.SetSpecs() {
		if k.Has(s.Name) {
			t.Errorf("cleanup left lbd's %s", s.Name)
		}
	}
}

func TestIsLBD(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{desired.SetSpecs()[0].Name, true},
		{desired.SetSpecs()[len(desired.SetSpecs())-1].Name, true},
		{"LBD-ALLOW", false},
		{"LBD6-ALLOW", false},
		{"LBD-", false},
		{"lbd-services", false},
		{"", false},
	} {
		if got := ipset.IsLBD(tc.name); got != tc.want {
			t.Errorf("IsLBD(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInterruptedDumpIsRetried(t *testing.T) {
	tests := []struct {
		name       string
		interrupts int
		wantDumps  int
		wantErr    bool
	}{
		{"interrupted once", 1, 2, false},
		{"interrupted all but the last attempt", genl.DumpAttempts - 1, genl.DumpAttempts, false},
		{"interrupted every time", genl.DumpAttempts, genl.DumpAttempts, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(5, 5))
			k := &fakeipset.Kernel{}
			a := ipset.New(k)
			st := randomState(t, r, nil)
			if _, err := a.Apply(&st, false); err != nil {
				t.Fatal(err)
			}
			// Drift for the full sync to repair, and leftovers to delete:
			// an interrupted run that saw them twice must not count twice.
			k.Flush("LBD-SERVICES")
			next := randomState(t, r, &st)
			k.Interrupt = tt.interrupts
			res, err := a.Apply(&next, true)
			if res.Dumps != tt.wantDumps {
				t.Errorf("%d dumps, want %d", res.Dumps, tt.wantDumps)
			}
			if tt.wantErr {
				if !errors.Is(err, genl.ErrDumpInterrupted) {
					t.Fatalf("error %v, want an interrupted dump", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := k.String(); got != want(&next) {
				t.Errorf("kernel\n%s\nwant\n%s", got, want(&next))
			}
			if res, err := a.Apply(&next, true); err != nil || res.Writes != 0 {
				t.Errorf("next full sync: %+v, %v; want nothing to write", res, err)
			}
		})
	}
	// Cleanup retries too.
	k := &fakeipset.Kernel{}
	if err := k.Create(desired.SetSpecs()[0]); err != nil {
		t.Fatal(err)
	}
	k.Interrupt = 2
	if done, err := ipset.Cleanup(k); err != nil || len(done) != 1 {
		t.Errorf("cleanup after interrupted dumps: %v, %v", done, err)
	}
}

func TestWriteErrorsAreBounded(t *testing.T) {
	k := &fakeipset.Kernel{}
	a := ipset.New(k)
	state := func(reals int) desired.State {
		var b strings.Builder
		b.WriteString("[[service]]\nname = \"web\"\nvips = [\"192.0.2.1\"]\nport = 80\n")
		for i := range reals {
			fmt.Fprintf(&b, "[[service.real_server]]\naddress = \"10.0.%d.%d\"\n", i/250, 1+i%250)
		}
		cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(b.String())})
		if err != nil {
			t.Fatal(err)
		}
		return desired.Compute(desired.Input{Config: cfg})
	}
	one, many := state(1), state(300)
	if _, err := a.Apply(&one, true); err != nil {
		t.Fatal(err)
	}
	// Every set destroyed under lbd: every add of the next sync fails.
	for _, s := range desired.SetSpecs() {
		if err := k.Destroy(s.Name); err != nil {
			t.Fatal(err)
		}
	}
	_, err := a.Apply(&many, false)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if n := strings.Count(msg, "\n") + 1; n > 6 || len(msg) > 1000 || !strings.Contains(msg, "more entries that failed") {
		t.Errorf("error of %d lines, %d bytes:\n%s", n, len(msg), msg)
	}
}
