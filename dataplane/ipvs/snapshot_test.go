package ipvs_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// render lists weights one destination per line, sorted.
func render(w map[lvs.Key]map[netip.AddrPort]int) string {
	var lines []string
	for k, dests := range w {
		lines = append(lines, k.String())
		for addr, weight := range dests {
			lines = append(lines, fmt.Sprintf("%s -> %s w=%d", k, addr, weight))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// kernelWeights reads what the fake kernel holds, as Snapshot.Weights
// lists it.
func kernelWeights(t *testing.T, f *fixture) map[lvs.Key]map[netip.AddrPort]int {
	t.Helper()
	dump, err := f.k.Dump()
	if err != nil {
		t.Fatal(err)
	}
	out := map[lvs.Key]map[netip.AddrPort]int{}
	for _, s := range dump {
		out[s.Key] = map[netip.AddrPort]int{}
		for _, d := range s.Dests {
			out[s.Key][d.Addr] = d.Weight
		}
	}
	return out
}

// TestSnapshotNeverChanges takes a snapshot, applies a change, and checks
// that the snapshot still shows the kernel as it was while a new one shows
// it as it is: status and metrics read snapshots while the next sync runs.
func TestSnapshotNeverChanges(t *testing.T) {
	base := []desired.Service{svc(web, "wrr", rs1, 3, rs2, 1), svc(dns, "rr", rs1, 1, rs2, 1)}
	tests := []struct {
		name string
		full bool
		next []desired.Service
	}{
		{"a weight changes", false, []desired.Service{svc(web, "wrr", rs1, 5, rs2, 1), base[1]}},
		{"a destination is added", false, []desired.Service{svc(web, "wrr", rs1, 3, rs2, 1, rs3, 1), base[1]}},
		{"a TCP destination drains", false, []desired.Service{svc(web, "wrr", rs1, 3), base[1]}},
		{"a UDP destination is deleted", false, []desired.Service{base[0], svc(dns, "rr", rs1, 1)}},
		{"the scheduler changes", false, []desired.Service{svc(web, "rr", rs1, 3, rs2, 1), base[1]}},
		{"a virtual server is deleted", false, base[:1]},
		{"a virtual server is added", false, append(slices.Clone(base), svc(other, "rr", rs3, 1))},
		{"a full reconcile", true, base},
	}
	for _, k := range kernels {
		for _, tt := range tests {
			t.Run(k.name+"/"+tt.name, func(t *testing.T) {
				f := fixtureFor(k.batch)
				f.apply(t, false, base...)
				before := f.a.Snapshot()
				was := render(before.Weights())
				if want := render(kernelWeights(t, f)); was != want {
					t.Fatalf("snapshot after the first sync:\n%s\nkernel:\n%s", was, want)
				}
				f.apply(t, tt.full, tt.next...)
				if got := render(before.Weights()); got != was {
					t.Errorf("the earlier snapshot changed:\n%s\nwas:\n%s", got, was)
				}
				if got, want := render(f.a.Snapshot().Weights()), render(kernelWeights(t, f)); got != want {
					t.Errorf("new snapshot:\n%s\nkernel:\n%s", got, want)
				}
			})
		}
	}
}

func TestSnapshotBeforeAnySync(t *testing.T) {
	f := newFixture()
	s := f.a.Snapshot()
	if s.Weights() != nil || s.Conns() != nil {
		t.Errorf("snapshot before the first Apply: weights=%v conns=%v; want nothing known (nil)", s.Weights(), s.Conns())
	}
	f.apply(t, false, svc(web, "rr", rs1, 1))
	if s := f.a.Snapshot(); len(s.Conns()[web]) != 1 {
		t.Errorf("snapshot after a sync: %v; want web's destination with its connection counts", s.Conns())
	}
}
