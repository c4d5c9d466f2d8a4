package metrics

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// BenchmarkSetHealth100k is one health change at 10,000 services x 10
// checked real servers: what the metrics cost the health path per flip.
func BenchmarkSetHealth100k(b *testing.B) {
	h := make(map[lvs.HealthKey]bool, 100000)
	for i := range 100000 {
		h[lvs.HealthKey{Service: fmt.Sprintf("s%d", i/10), Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 80)}] = true
	}
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.SetHealth(h)
	}
}
