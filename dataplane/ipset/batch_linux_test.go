package ipset

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink/nl"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// dumpAll returns every lbd set's entries, sorted, by the streaming Dump.
func dumpAll(t *testing.T, k *NetlinkKernel) map[string][]desired.SetEntry {
	t.Helper()
	got := map[string][]desired.SetEntry{}
	err := k.Dump(func(name string, _ desired.SetType, _ int) func(desired.SetEntry) {
		got[name] = []desired.SetEntry{}
		return func(e desired.SetEntry) { got[name] = append(got[name], e) }
	})
	if err != nil {
		t.Fatal(err)
	}
	for n, es := range got {
		got[n] = sorted(es)
	}
	return got
}

// printed returns the entries ipset list prints for a set, sorted.
func printed(t *testing.T, ns, set string) []string {
	t.Helper()
	var out []string
	if _, members, ok := strings.Cut(testnetns.Run(t, ns, "ipset", "list", set), "Members:\n"); ok {
		out = strings.Fields(members)
	}
	slices.Sort(out)
	return out
}

// checkSets requires the kernel's lbd sets to hold exactly want, as Dump
// reads them and as ipset list prints them.
func checkSets(t *testing.T, ns string, k *NetlinkKernel, want map[string][]desired.SetEntry) {
	t.Helper()
	got := dumpAll(t, k)
	for _, spec := range desired.SetSpecs() {
		w := sorted(want[spec.Name])
		if g := got[spec.Name]; !slices.Equal(g, w) {
			t.Errorf("%s: Dump: %s", spec.Name, firstDiff(g, w))
		}
		var texts []string
		for _, e := range w {
			texts = append(texts, strings.Fields(ipsetText(e))...) // "... skbmark 0x7" is three
		}
		slices.Sort(texts)
		if p := printed(t, ns, spec.Name); !slices.Equal(p, texts) {
			t.Errorf("%s: ipset list: %s", spec.Name, firstDiff(p, texts))
		}
	}
}

func createAll(t *testing.T, k *NetlinkKernel) {
	t.Helper()
	for _, spec := range desired.SetSpecs() {
		if err := k.Create(spec); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteOnTheKernel adds and deletes entries of every lbd set (each
// type, IPv4 and IPv6) in sends mixing the sets, in several send sizes.
func TestWriteOnTheKernel(t *testing.T) {
	ns, k := kernelIn(t)
	createAll(t, k)
	r := rand.New(rand.NewPCG(3, 4))
	want := map[string][]desired.SetEntry{}
	var ops []Op
	for _, spec := range desired.SetSpecs() {
		es := randomEntries(r, spec, 300)
		want[spec.Name] = es
		for _, e := range es {
			ops = append(ops, Op{Set: spec.Name, Entry: e})
		}
	}
	r.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for i, err := range k.writeBatched(ops, 100) {
		if err != nil {
			t.Fatalf("adding %s to %s: %v", ops[i].Entry, ops[i].Set, err)
		}
	}
	checkSets(t, ns, k, want)

	// Delete every other entry of each set.
	ops = ops[:0]
	for name, es := range want {
		var keep []desired.SetEntry
		for i, e := range es {
			if i%2 == 0 {
				ops = append(ops, Op{Set: name, Entry: e, Del: true})
			} else {
				keep = append(keep, e)
			}
		}
		want[name] = keep
	}
	r.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	for i, err := range k.Write(ops) {
		if err != nil {
			t.Fatalf("deleting %s from %s: %v", ops[i].Entry, ops[i].Set, err)
		}
	}
	checkSets(t, ns, k, want)
}

// TestWriteErrors: a failing op gets the kernel's error, as Add and Del
// return it, and only it; the others of its send are applied, wherever in
// the send it is (the last one asks the ack its error replaces).
func TestWriteErrors(t *testing.T) {
	ns, k := kernelIn(t)
	createAll(t, k)
	r := rand.New(rand.NewPCG(5, 6))
	spec4, spec6 := desired.SetID(0).Spec(), desired.SetID(desired.NumSets-1).Spec()
	es4 := randomEntries(r, spec4, 1000)
	es6 := randomEntries(r, spec6, 1000)
	present := es4[0]
	if err := k.Add(spec4.Name, present); err != nil {
		t.Fatal(err)
	}
	// The errors the one-call path gets for the same mistakes.
	errExist := k.Add(spec4.Name, present)
	errMissing := k.Del(spec4.Name, es4[1])
	errNoSet := k.Add("LBD-NOPE", es4[1])
	t.Logf("existing: %v (%d); missing: %v; no set: %v", errExist, errExist, errMissing, errNoSet)
	if !errors.Is(errExist, nl.IPSetError(nl.IPSET_ERR_EXIST)) || errMissing == nil || !errors.Is(errNoSet, syscall.ENOENT) {
		t.Fatalf("unexpected errors from Add/Del: %v, %v, %v", errExist, errMissing, errNoSet)
	}

	type bad struct {
		op   Op
		want error
	}
	bads := []bad{
		{Op{Set: spec4.Name, Entry: present}, errExist},
		{Op{Set: spec4.Name, Entry: es4[1], Del: true}, errMissing},
		{Op{Set: "LBD-NOPE", Entry: es4[2]}, errNoSet},
		{Op{Set: "LBD-NOPE", Entry: es4[2], Del: true}, errNoSet},
		{Op{Set: spec6.Name, Entry: es6[0], Del: true}, k.Del(spec6.Name, es6[0])},
	}
	// Good ops take the entries after these (each round undoes them).
	next4, next6 := 0, 0
	for _, perSend := range []int{1, 2, 3, 7, batchPerSend} {
		for _, pos := range []string{"first", "middle", "last"} {
			// perSend good ops with the bad ones at pos of each send.
			var ops []Op
			var wantErr []error
			for _, b := range bads {
				good := make([]Op, perSend-1)
				for i := range good {
					if i%2 == 0 {
						good[i] = Op{Set: spec4.Name, Entry: es4[3+next4%(len(es4)-3)]}
						next4++
					} else {
						good[i] = Op{Set: spec6.Name, Entry: es6[1+next6%(len(es6)-1)]}
						next6++
					}
				}
				at := map[string]int{"first": 0, "middle": len(good) / 2, "last": len(good)}[pos]
				send := slices.Insert(good, at, b.op)
				ops = append(ops, send...)
				for i := range send {
					if i == at {
						wantErr = append(wantErr, b.want)
					} else {
						wantErr = append(wantErr, nil)
					}
				}
			}
			errs := k.writeBatched(ops, perSend)
			for i, err := range errs {
				if !errors.Is(err, wantErr[i]) || (err == nil) != (wantErr[i] == nil) {
					t.Errorf("%d per send, bad op %s: op %d (%+v): %v; want %v", perSend, pos, i, ops[i], err, wantErr[i])
				}
			}
			// The good ones were applied: deleting them now succeeds.
			var undo []Op
			for i, op := range ops {
				if wantErr[i] == nil {
					undo = append(undo, Op{Set: op.Set, Entry: op.Entry, Del: true})
				}
			}
			for i, err := range k.Write(undo) {
				if err != nil {
					t.Errorf("%d per send, bad op %s: %+v not applied: %v", perSend, pos, undo[i], err)
				}
			}
		}
	}
	checkSets(t, ns, k, map[string][]desired.SetEntry{spec4.Name: {present}})
}

// TestWriteLarge adds and deletes 100,000 entries, hundreds of sends.
func TestWriteLarge(t *testing.T) {
	ns, k := kernelIn(t)
	createAll(t, k)
	r := rand.New(rand.NewPCG(9, 9))
	want := map[string][]desired.SetEntry{}
	var ops []Op
	for name, n := range map[string]int{"LBD-SRC-RANGES": 40000, "LBD6-SRC-RANGES": 40000, "LBD-VIPS": 20000} {
		i := slices.IndexFunc(desired.SetSpecs(), func(s desired.SetSpec) bool { return s.Name == name })
		if i < 0 {
			t.Fatalf("no set %s", name)
		}
		es := randomEntries(r, desired.SetID(i).Spec(), n)
		want[name] = es
		for _, e := range es {
			ops = append(ops, Op{Set: name, Entry: e})
		}
	}
	if len(ops) != 100000 {
		t.Fatalf("%d ops", len(ops))
	}
	for i, err := range k.Write(ops) {
		if err != nil {
			t.Fatalf("op %d (%+v): %v", i, ops[i], err)
		}
	}
	checkSets(t, ns, k, want)
	for i := range ops {
		ops[i].Del = true
	}
	for i, err := range k.Write(ops) {
		if err != nil {
			t.Fatalf("op %d (%+v): %v", i, ops[i], err)
		}
	}
	checkSets(t, ns, k, nil)
}

// plainKernel hides NetlinkKernel's Write: the applier writes one entry a
// call.
type plainKernel struct{ Kernel }

// TestApplierWriteBatched: the applier's write through Write (in chunks)
// and one call per entry have the same outcome: kernel state, per-set
// counts, writes counted, errors (a missing set, entries already there,
// deletions of absent ones).
func TestApplierWriteBatched(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var adds, dels []key
	var pre []Op // in the kernel before
	var gone string
	for id := range desired.NumSets {
		spec := id.Spec()
		es := randomEntries(r, spec, 700)
		for i, e := range es {
			k := toKey(desired.Member{Set: id, Entry: e})
			switch {
			case i < 500:
				adds = append(adds, k)
				if i%50 == 0 { // already there
					pre = append(pre, Op{Set: spec.Name, Entry: e})
				}
			case i < 650:
				dels = append(dels, k)
				if i%30 != 0 { // else absent
					pre = append(pre, Op{Set: spec.Name, Entry: e})
				}
			default:
				pre = append(pre, Op{Set: spec.Name, Entry: e}) // left alone
			}
		}
		if spec.Name == "LBD6-SERVICES" {
			gone = spec.Name
		}
	}
	if gone == "" {
		t.Fatal("no set LBD6-SERVICES")
	}
	type outcome struct {
		err    string
		perSet [desired.NumSets]int
		writes int
		sets   map[string][]desired.SetEntry
	}
	run := func(batched bool) outcome {
		ns, k := kernelIn(t)
		createAll(t, k)
		for i, err := range k.Write(pre) {
			if err != nil {
				t.Fatalf("%+v: %v", pre[i], err)
			}
		}
		testnetns.Run(t, ns, "ipset", "destroy", gone)
		a := &Applier{k: k}
		if !batched {
			a.k = plainKernel{k}
		}
		var stats Stats
		err := a.write(slices.Clone(adds), slices.Clone(dels), &stats)
		if err == nil {
			t.Fatal("no error")
		}
		return outcome{err.Error(), a.perSet, stats.Writes, dumpAll(t, k)}
	}
	plain, batched := run(false), run(true)
	if batched.err != plain.err {
		t.Errorf("errors differ:\nbatched %s\nplain   %s", batched.err, plain.err)
	}
	// The missing set's 650 ops; in each other set 10 adds of entries
	// there and 5 deletions of absent ones: the first few are told, the
	// others counted.
	var more int
	lines := strings.Split(plain.err, "\n")
	if _, err := fmt.Sscanf(lines[len(lines)-1], "and %d more entries that failed", &more); err != nil || len(lines) != 6 {
		t.Errorf("%d lines, last %q: want 5 errors and a count", len(lines), lines[len(lines)-1])
	}
	if n := len(lines) - 1 + more; n != 650+15*(int(desired.NumSets)-1) {
		t.Errorf("%d errors: %s", n, plain.err)
	}
	if batched.perSet != plain.perSet || batched.writes != plain.writes || batched.writes != len(adds)+len(dels) {
		t.Errorf("batched: %v, %d writes; plain: %v, %d writes", batched.perSet, batched.writes, plain.perSet, plain.writes)
	}
	if fmt.Sprint(batched.sets) != fmt.Sprint(plain.sets) {
		t.Errorf("the kernels differ")
	}
}

// TestWriteSpeed measures adding 200,000 entries one call per entry (Add)
// and with Write in several send sizes, and deleting them with Write.
// LBD_IPSET_WRITE_SPEED=1 runs it.
func TestWriteSpeed(t *testing.T) {
	if os.Getenv("LBD_IPSET_WRITE_SPEED") == "" {
		t.Skip("LBD_IPSET_WRITE_SPEED=1 measures")
	}
	const total = 200000
	ns, k := kernelIn(t)
	createAll(t, k)
	r := rand.New(rand.NewPCG(1, 2))
	var ops []Op
	for _, spec := range desired.SetSpecs() {
		for _, e := range randomEntries(r, spec, total/int(desired.NumSets)) {
			ops = append(ops, Op{Set: spec.Name, Entry: e})
		}
	}
	flush := func() {
		for _, spec := range desired.SetSpecs() {
			testnetns.Run(t, ns, "ipset", "flush", spec.Name)
		}
	}
	check := func(errs []error) {
		for i, err := range errs {
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
	}
	report := func(name string, m measured) {
		t.Logf("%-26s %d entries in %8v (%6.1f µs each): %7.1f MB allocated in %8d objects",
			name, m.n, m.took.Round(time.Millisecond), float64(m.took.Microseconds())/float64(m.n),
			float64(m.alloc)/1e6, m.objects)
	}
	report("Add, one call per entry", measure(func() int {
		for _, op := range ops {
			if err := k.Add(op.Set, op.Entry); err != nil {
				t.Fatal(err)
			}
		}
		return len(ops)
	}))
	flush()
	for _, perSend := range []int{16, 64, 128, 256, 512, 1024} {
		report(fmt.Sprintf("Write, %d per send", perSend), measure(func() int {
			for c := range slices.Chunk(ops, 1024) { // as the applier hands them
				check(k.writeBatched(c, perSend))
			}
			return len(ops)
		}))
		flush()
	}
	check(k.Write(ops))
	for i := range ops {
		ops[i].Del = true
	}
	report("Write (delete), default", measure(func() int {
		for c := range slices.Chunk(ops, 1024) {
			check(k.Write(c))
		}
		return len(ops)
	}))
}
