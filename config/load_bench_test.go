package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchTOML is lbd.toml as scripts/bench.sh generates it (see benchConfig
// in e2e/bench_test.go): services × reals, one VIP per service, TCP port 80,
// health checks off, every real server an inline table in an array.
func benchTOML(services, reals int) string {
	const realAddrs, realPort = 65000, 8080
	plus := func(base string, n int) netip.Addr {
		b := netip.MustParseAddr(base).As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	var b strings.Builder
	b.WriteString("# generated like TestBenchDataplane (e2e/bench_test.go)\n[sync]\nsync_period = \"10s\"\n")
	for i := range services {
		fmt.Fprintf(&b, "\n[[service]]\nname = \"svc%05d\"\nvips = [\"%s\"]\nport = 80\nhealth_check = { type = \"none\" }\nreal_server = [\n", i, plus("198.18.0.1", i))
		for j := range reals {
			k := i*reals + j
			fmt.Fprintf(&b, "  { address = \"%s\", port = %d, weight = %d },\n",
				plus("198.19.0.1", k%realAddrs), realPort+k/realAddrs, 1+j%3)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// heapSampler follows the heap while a load runs: the largest in-use heap
// (live objects, garbage not yet swept and unused span space: what the
// process's RSS has to hold) and the largest live heap marked by a GC.
type heapSampler struct {
	stop             chan struct{}
	wg               sync.WaitGroup
	inuse, live, gcs atomic.Uint64
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(samples)
	gc0 := samples[3].Value.Uint64()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			metrics.Read(samples)
			if v := samples[0].Value.Uint64() + samples[1].Value.Uint64(); v > h.inuse.Load() {
				h.inuse.Store(v)
			}
			// The live heap of the last GC; before the first GC of the
			// load it is what was live before the load.
			if samples[3].Value.Uint64() > gc0 {
				if v := samples[2].Value.Uint64(); v > h.live.Load() {
					h.live.Store(v)
				}
			}
			h.gcs.Store(samples[3].Value.Uint64() - gc0)
			select {
			case <-h.stop:
				return
			case <-time.After(50 * time.Microsecond):
			}
		}
	}()
	return h
}

func (h *heapSampler) done() {
	close(h.stop)
	h.wg.Wait()
}

func heapAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

const mib = 1 << 20

// BenchmarkLoad10k loads the benchmark configuration of scripts/bench.sh:
// 10,000 services × 10 real servers, a ~7 MB lbd.toml. Besides time, B/op
// and allocs/op it reports the peak in-use heap during a load (the
// highest sampled heap, GC garbage included, as RSS sees it), the peak live
// heap marked by a GC during the load, and the heap the loaded
// configuration retains after a GC.
func BenchmarkLoad10k(b *testing.B) {
	if testing.Short() {
		b.Skip("loads a 7 MB configuration; not in -short")
	}
	benchmarkLoad(b, 10000, 10)
}

// BenchmarkLoad1k is the same at 1,000 × 10, quick enough for -short.
func BenchmarkLoad1k(b *testing.B) { benchmarkLoad(b, 1000, 10) }

func benchmarkLoad(b *testing.B, services, reals int) {
	path := filepath.Join(b.TempDir(), "lbd.toml")
	if err := os.WriteFile(path, []byte(benchTOML(services, reals)), 0o644); err != nil {
		b.Fatal(err)
	}
	var peakInuse, peakLive, retained, gcs uint64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		base := heapAlloc()
		h := startHeapSampler()
		b.StartTimer()
		cfg, err := Load(path)
		b.StopTimer()
		h.done()
		if err != nil {
			b.Fatal(err)
		}
		if len(cfg.Services) != services || len(cfg.Services[services-1].RealServers) != reals {
			b.Fatalf("loaded %d services", len(cfg.Services))
		}
		runtime.GC()
		r := heapAlloc() - base
		runtime.KeepAlive(cfg)
		peakInuse = max(peakInuse, h.inuse.Load())
		peakLive = max(peakLive, h.live.Load())
		retained = max(retained, r)
		gcs = max(gcs, h.gcs.Load())
		b.StartTimer()
	}
	b.ReportMetric(float64(peakInuse)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(peakLive)/mib, "peak-live-MiB")
	b.ReportMetric(float64(retained)/mib, "retained-MiB")
	b.ReportMetric(float64(gcs), "GCs/op")
}
