package ipset_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipset"
)

// streamKernel replays fixed sets through Dump without allocating, and
// accepts every write without keeping it: the benchmarks measure the
// applier, not a kernel.
type streamKernel struct {
	specs   []desired.SetSpec
	entries [][]desired.SetEntry
	writes  int
}

func (k *streamKernel) Dump(set func(string, desired.SetType, int) func(desired.SetEntry)) error {
	for i, spec := range k.specs {
		if entry := set(spec.Name, spec.Type, spec.Family); entry != nil {
			for _, e := range k.entries[i] {
				entry(e)
			}
		}
	}
	return nil
}

func (k *streamKernel) Create(desired.SetSpec) error       { k.writes++; return nil }
func (k *streamKernel) Destroy(string) error               { k.writes++; return nil }
func (k *streamKernel) Add(string, desired.SetEntry) error { k.writes++; return nil }
func (k *streamKernel) Del(string, desired.SetEntry) error { k.writes++; return nil }
func (k *streamKernel) Write(ops []ipset.Op) []error {
	k.writes += len(ops)
	return make([]error, len(ops))
}

// fill makes the kernel hold sets (every set lbd owns, some empty).
func (k *streamKernel) fill(sets map[string][]desired.SetEntry) {
	k.specs, k.entries = desired.SetSpecs(), nil
	for _, spec := range k.specs {
		k.entries = append(k.entries, sets[spec.Name])
	}
}

// benchState is scripts/bench.sh's workload (10,000 services x 10 real
// servers, one VIP each), with every tenth service firewalled so that
// every type of set has entries.
func benchState(b *testing.B) desired.State {
	const services, reals = 10000, 10
	var text strings.Builder
	for i := range services {
		fmt.Fprintf(&text, "[[service]]\nname = \"s%d\"\nvips = [\"198.18.%d.%d\"]\nport = 80\nhealth_check = { type = \"none\" }\n", i, i/250, i%250+1)
		if i%10 == 0 {
			text.WriteString("source_ranges = [\"203.0.113.0/24\", \"198.51.100.0/24\"]\n")
		}
		for j := range reals {
			k := i*reals + j + 1
			fmt.Fprintf(&text, "[[service.real_server]]\naddress = \"10.%d.%d.%d\"\nport = 8080\n", k>>16, k>>8&255, k&255)
		}
	}
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text.String())})
	if err != nil {
		b.Fatal(err)
	}
	host := []netip.Addr{netip.MustParseAddr("192.0.2.10")}
	return desired.Compute(desired.Input{Config: cfg, HostAddrs: host})
}

// BenchmarkApplyFull10k is a full (periodic) sync at scripts/bench.sh's
// size: "steady" finds the kernel already right (one dump, no writes),
// "cold" finds every set empty and adds every entry.
func BenchmarkApplyFull10k(b *testing.B) {
	st := benchState(b)
	sets := st.SetEntries()
	entries := 0
	for _, es := range sets {
		entries += len(es)
	}
	b.Run("steady", func(b *testing.B) {
		k := &streamKernel{}
		k.fill(sets)
		a := ipset.New(k)
		if _, err := a.Apply(&st, true); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := a.Apply(&st, true)
			if err != nil || res.Writes != 0 || res.Entries != entries {
				b.Fatalf("%+v, %v; want no writes and %d entries", res, err, entries)
			}
		}
		b.ReportMetric(float64(entries), "entries")
	})
	b.Run("cold", func(b *testing.B) {
		k := &streamKernel{}
		k.fill(map[string][]desired.SetEntry{})
		b.ReportAllocs()
		for b.Loop() {
			a := ipset.New(k)
			res, err := a.Apply(&st, true)
			if err != nil || res.Writes != entries || res.Entries != entries {
				b.Fatalf("%+v, %v; want %d writes and entries", res, err, entries)
			}
		}
	})
}
