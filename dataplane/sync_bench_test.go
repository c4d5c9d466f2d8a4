package dataplane_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
	"github.com/lbdproject/lbd/dataplane/ipset"
	"github.com/lbdproject/lbd/dataplane/ipset/fakeipset"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
)

// benchConfig is scripts/bench.sh's workload: n services with one VIP
// each and m real servers, weights 1, 2, 3 in turn.
func benchConfig(b *testing.B, n, m int) *config.Config {
	var text strings.Builder
	text.WriteString("[sync]\nmin_sync_period = \"0s\"\nsync_period = \"1h\"\nmax_delete_fraction = 1.0\n")
	for i := range n {
		fmt.Fprintf(&text, "[[service]]\nname = \"s%d\"\nvips = [\"198.18.%d.%d\"]\nport = 80\nscheduler = \"wrr\"\nhealth_check = { type = \"none\" }\n", i, i/250, i%250+1)
		for j := range m {
			w := j%3 + 1
			k := i*m + j + 1
			fmt.Fprintf(&text, "[[service.real_server]]\naddress = \"10.%d.%d.%d\"\nport = 8080\nweight = %d\n", k>>16, k>>8&255, k&255, w)
		}
	}
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text.String())})
	if err != nil {
		b.Fatal(err)
	}
	return cfg
}

// BenchmarkWeightChange10k is the event-driven sync after one weight change
// at scripts/bench.sh's size, on the host with in-memory kernels: the Go
// side of the sync, which the ≤ 1 % target (of a cold sync) is about. It
// reports the live heap after the syncs as heap-MiB.
func BenchmarkWeightChange10k(b *testing.B) {
	const n, m = 10000, 10
	base := benchConfig(b, n, m)
	// The edited copy shares every other service's real servers, as
	// scripts/bench.sh's does (configurations are immutable once applied).
	edited := *base
	edited.Services = slices.Clone(base.Services)
	edited.Services[0].RealServers = slices.Clone(base.Services[0].RealServers)
	edited.Services[0].RealServers[0].Weight++
	cfgs := [2]*config.Config{base, &edited}
	dp := dataplane.New(dataplane.Options{
		IPVS:  ipvs.New(&fakeipvs.Kernel{}, &fakeipvs.Ledger{}),
		Addrs: addrs.New(&fakeaddrs.Kernel{}, "lbd0"),
		Sets:  ipset.New(&fakeipset.Kernel{}),
		Sync:  cfgs[0].Sync,
	})
	done := make(chan dataplane.SyncResult, 1)
	dp.OnSync(func(r dataplane.SyncResult) { done <- r })
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	go dp.Loop(ctx)
	sync := func(cfg *config.Config) dataplane.SyncResult {
		setConfig(dp, cfg)
		for {
			r := <-done
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if r.Writes > 0 || r.Reason.Full() {
				return r
			}
		}
	}
	start := time.Now()
	cold := sync(cfgs[0])
	b.Logf("cold sync: %s, %d writes (%s with the wait)", cold.Duration, cold.Writes, time.Since(start))
	b.ReportAllocs()
	b.ResetTimer()
	i := 1
	for b.Loop() {
		r := sync(cfgs[i%2])
		if r.Writes != 1 || r.Dumps != 0 {
			b.Fatalf("weight change: %d writes, %d dumps", r.Writes, r.Dumps)
		}
		i++
	}
	b.StopTimer()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	runtime.KeepAlive(cfgs)
}
