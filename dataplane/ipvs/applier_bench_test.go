package ipvs_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/lvs"
)

// BenchmarkFullReconcile10k is the applier's side of a full reconcile
// with nothing to change at scripts/bench.sh's size (10,000 services ×
// 10): rebuilding the cache from a dump and comparing every destination.
// The fake kernel's dump (a copy of its table) is part of the figure; the
// real kernel's netlink and /proc reads are not.
func BenchmarkFullReconcile10k(b *testing.B) {
	want := benchWant()
	a := ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{})
	if _, err := a.Apply(want, false); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := a.Apply(want, true)
		if err != nil || res.Writes != 0 {
			b.Fatalf("full reconcile: %+v, %v; want no writes", res, err)
		}
		a.Snapshot() // as the dataplane takes one after every sync
	}
}

// benchWant is scripts/bench.sh's IPVS table: 10,000 services × 10 real
// servers, weights 1, 2, 3 in turn.
func benchWant() []desired.Service {
	want := make([]desired.Service, 10000)
	for i := range want {
		s := desired.Service{Key: lvs.Key{Addr: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Port: 80, Protocol: lvs.TCP},
			Scheduler: "wrr", Netmask: 0xffffffff, DrainTimeout: time.Minute}
		for j := range 10 {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)})
			s.Dests = append(s.Dests, desired.Dest{Addr: netip.AddrPortFrom(a, 8080), Weight: j%3 + 1})
		}
		want[i] = s
	}
	return want
}

// BenchmarkColdApply10k is the applier's side of a cold sync at
// scripts/bench.sh's size: an empty fake kernel (one call per object) and
// a new applier each time.
func BenchmarkColdApply10k(b *testing.B) {
	want := benchWant()
	b.ReportAllocs()
	for b.Loop() {
		a := ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{})
		if _, err := a.Apply(want, false); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkColdApplyBatch10k is BenchmarkColdApply10k through a kernel
// that creates new virtual servers in batches, as the netlink kernel does.
func BenchmarkColdApplyBatch10k(b *testing.B) {
	want := benchWant()
	b.ReportAllocs()
	for b.Loop() {
		a := ipvs.New(fakeipvs.BatchKernel{Kernel: &fakeipvs.Kernel{}}, &fakeipvs.Ledger{})
		if _, err := a.Apply(want, false); err != nil {
			b.Fatal(err)
		}
	}
}
