package ipvs

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// benchServices returns n services of dests destinations each, every other
// one IPv6.
func benchServices(n, dests int) []Service {
	svcs := make([]Service, n)
	for i := range svcs {
		s := Service{Scheduler: "wrr", Netmask: 0xffffffff}
		s.Key = lvs.Key{Addr: netip.AddrFrom4([4]byte{198, 18, byte(i >> 8), byte(i)}), Port: 80, Protocol: lvs.TCP}
		if i%2 == 1 {
			s.Key = lvs.Key{Addr: netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i)), Port: 53, Protocol: lvs.UDP}
			s.Scheduler, s.Netmask = "mh", 128
		}
		for j := range dests {
			a := netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(j)})
			if i%2 == 1 {
				a = netip.MustParseAddr(fmt.Sprintf("2001:db8:1::%x:%x", i, j))
			}
			s.Dests = append(s.Dests, Dest{Addr: netip.AddrPortFrom(a, 8080), Weight: j + 1})
		}
		svcs[i] = s
	}
	return svcs
}

// BenchmarkEncodeChunk encodes what AddServices sends for one chunk of
// 128 services with 10 destinations each (1,408 requests), emptying the
// buffer every defaultBatchPerSend requests as flush does, without
// sending anything.
func BenchmarkEncodeChunk(b *testing.B) {
	svcs := benchServices(defaultBatchPerSend, 10)
	w := &batchWriter{family: 0x1234}
	const flags = syscall.NLM_F_REQUEST
	reqs, bytes := 0, 0
	emptied := func() {
		reqs += len(w.sent)
		bytes += len(w.Encoded())
		w.Reset()
		w.sent = w.sent[:0]
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range svcs {
			w.appendService(&svcs[i], flags, i)
			if len(w.sent) == defaultBatchPerSend {
				emptied()
			}
		}
		emptied()
		for i := range svcs {
			for j := range svcs[i].Dests {
				w.appendDest(&svcs[i], j, flags, i)
				if len(w.sent) == defaultBatchPerSend {
					emptied()
				}
			}
		}
		emptied()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(reqs), "ns/request")
	b.ReportMetric(float64(bytes)/float64(reqs), "bytes/request")
}
