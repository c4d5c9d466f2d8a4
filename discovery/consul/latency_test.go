package consul

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// BenchmarkRegistrationToSnapshot measures, for each op, the time from
// registering an instance through the agent to the Watcher's snapshot
// carrying it, with default Options, and reports the median and p99:
//
//	go test -run '^$' -bench RegistrationToSnapshot -benchtime 100x ./discovery/consul/
//
// "isolated" waits a second between changes, so the rate limits (burst 3,
// then one per MinInterval) start each change afresh; "back-to-back"
// registers the next instance as soon as the previous one is seen (and
// removed), so that the limits show.
func BenchmarkRegistrationToSnapshot(b *testing.B) {
	agent := consultest.Start(b, consultest.Options{})
	for _, bc := range []struct {
		name  string
		pause time.Duration
	}{
		{"isolated", time.Second},
		{"back-to-back", 0},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := NewClient(consulConfigB(agent))
			if err != nil {
				b.Fatal(err)
			}
			w := New(Options{Client: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			svc := "bench-" + bc.name
			w.SetQueries([]Query{{Service: svc}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			waitForB(b, w, func(s Snapshot) bool { _, ok := s.Services[svc]; return ok })

			agentAPI := agent.Client("").Agent()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("%s-%d", svc, i)
				start := time.Now()
				err := agentAPI.ServiceRegister(&api.AgentServiceRegistration{
					ID: id, Name: svc, Address: "10.0.0.1", Port: 1000 + i%1000,
					Check: &api.AgentServiceCheck{TTL: "10m", Status: api.HealthPassing},
				})
				if err != nil {
					b.Fatal(err)
				}
				waitForB(b, w, func(s Snapshot) bool { return len(s.Services[svc]) == 1 && s.Services[svc][0].ID == id })
				lat = append(lat, time.Since(start))

				b.StopTimer()
				if err := agentAPI.ServiceDeregister(id); err != nil {
					b.Fatal(err)
				}
				waitForB(b, w, func(s Snapshot) bool { return len(s.Services[svc]) == 0 })
				time.Sleep(bc.pause)
				b.StartTimer()
			}
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			median, p99 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
			b.ReportMetric(ms(median), "ms-median")
			b.ReportMetric(ms(p99), "ms-p99")
			b.ReportMetric(0, "ns/op")
			b.Logf("%s: %d registrations, latency to the snapshot: min %v, median %v, p99 %v, max %v",
				bc.name, len(lat), lat[0], median, p99, lat[len(lat)-1])
		})
	}
}

func consulConfigB(agent *consultest.Agent) config.Consul {
	return config.Consul{Enabled: true, Address: agent.Addr()}
}

func waitForB(b *testing.B, w *Watcher, ok func(Snapshot) bool) {
	b.Helper()
	timeout := time.After(patience)
	for {
		select {
		case s := <-w.Updates():
			if ok(s) {
				return
			}
		case <-timeout:
			b.Fatalf("no matching snapshot after %v", patience)
		}
	}
}
