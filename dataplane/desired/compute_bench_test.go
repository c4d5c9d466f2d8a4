package desired

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// BenchmarkCompute10k is the desired state of scripts/bench.sh's size
// (10,000 services x 10 real servers, health known for every real server):
// what every sync pays before it writes anything, a weight change included.
func BenchmarkCompute10k(b *testing.B) {
	const services, reals = 10000, 10
	var text strings.Builder
	text.WriteString("[dataplane]\nlocal_networks = [\"10.0.0.0/8\"]\n")
	health := map[lvs.HealthKey]bool{}
	for i := range services {
		name := fmt.Sprintf("svc%d", i)
		fmt.Fprintf(&text, "[[service]]\nname = %q\nvips = [\"198.18.%d.%d\"]\nport = 80\n", name, i/250, i%250+1)
		for j := range reals {
			addr := fmt.Sprintf("10.%d.%d.%d", 1+i/250, i%250, j+1)
			fmt.Fprintf(&text, "[[service.real_server]]\naddress = %q\n", addr)
			health[lvs.HealthKey{Service: name, Addr: netip.AddrPortFrom(netip.MustParseAddr(addr), 80)}] = true
		}
	}
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text.String())})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Config: cfg, Health: health}
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st := Compute(in)
			if len(st.Services) != services {
				b.Fatalf("%d services", len(st.Services))
			}
		}
	})
	// One real server's health flips, with the previous result: what an
	// event-driven sync computes.
	b.Run("one-change", func(b *testing.B) {
		flipped := maps.Clone(health)
		flipped[lvs.HealthKey{Service: "svc0", Addr: netip.MustParseAddrPort("10.1.0.1:80")}] = false
		hs := [2]map[lvs.HealthKey]bool{health, flipped}
		prev := Compute(in)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			prev = Compute(Input{Config: cfg, Health: hs[i%2], HealthVersion: uint64(i), Prev: &prev})
		}
	})
}
