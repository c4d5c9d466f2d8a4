//go:build e2e

package e2e

// TestBenchForwarding measures NAT, direct routing and IPIP with the same
// real servers and the same client load (ab, a fixed response size), in
// interleaved rounds of one guest run: requests/s through one VIP, and
// what the director carries per request (its links' packets and bytes,
// IPVS's in and out packets). It runs only with LBD_E2E_FWDBENCH=1
// (scripts/bench-forwarding.sh sets it). Figures are reported, never
// asserted; a failed request fails it.

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

const fwdBenchEnv = "LBD_E2E_FWDBENCH"

// fwdVariant is one forwarding method under test, on its own VIP.
type fwdVariant struct {
	name   string
	vip    netip.AddrPort
	config string // the service's forwarding keys
}

// fwdFigures is what one round of one variant measured.
type fwdFigures struct {
	rps                        float64
	pkts, bytes                float64 // the director's links, both directions, per request
	ipvsIn, ipvsOut            float64 // per request
	failed, requests, elapsedS int
}

func TestBenchForwarding(t *testing.T) {
	if os.Getenv(fwdBenchEnv) != "1" {
		t.Skipf("a benchmark: set %s=1 (scripts/bench-forwarding.sh)", fwdBenchEnv)
	}
	rounds := envInt(t, "LBD_E2E_FWDBENCH_ROUNDS", 3, 1, 20)
	requests := envInt(t, "LBD_E2E_FWDBENCH_REQUESTS", 2000, 100, 1000000)
	size := envInt(t, "LBD_E2E_FWDBENCH_SIZE", 64<<10, 0, 16<<20)
	concurrency := envInt(t, "LBD_E2E_FWDBENCH_CONCURRENCY", 8, 1, 1000)
	e := newForwardEnv(t)
	variants := []fwdVariant{
		// Masqueraded, so that its replies come back through the director
		// while the real servers' default route leads to the router.
		{"nat (masqueraded)", netip.AddrPortFrom(topo.VIP(1), 80), `snat = "always"`},
		{"dr", netip.AddrPortFrom(topo.VIP(2), 80), `forward = "dr"`},
		{"ipip", netip.AddrPortFrom(topo.VIP(3), 80), `forward = "tun"`},
	}
	// A tunnel real server's set-up serves direct routing too (the VIPs on
	// lo, ARP suppressed).
	e.realServerSetup(t, "--method", "tun", "--tunnel", "ipip", "--vip", variants[1].vip.Addr().String(), "--vip", variants[2].vip.Addr().String())
	var cfg strings.Builder
	for _, v := range variants {
		fmt.Fprintf(&cfg, "\n[[service]]\nname = %q\nvips = [\"%s\"]\nport = 80\nscheduler = \"rr\"\n%s\nhealth_check = { type = \"none\" }\nreal_server = [{ address = \"%s\" }, { address = \"%s\" }]\n",
			strings.Fields(v.name)[0], v.vip.Addr(), v.config, e.tp.RealServers[0].Addr(e.tp.Backend), e.tp.RealServers[1].Addr(e.tp.Backend))
	}
	l := startLBD(t, e.dir, cfg.String())
	waitIPVS(t, e.dir, "IPVS to hold the three services", l.plan(t))
	results := make([][]fwdFigures, len(variants))
	for r := range rounds {
		for i, v := range variants {
			waitServes(t, e.client, topo.HTTP, v.vip)
			f := e.benchRound(t, v.vip, requests, concurrency, size)
			t.Logf("round %d %s: %.0f requests/s, %.1f packets and %.0f bytes per request on the director, IPVS in %.1f out %.1f",
				r+1, v.name, f.rps, f.pkts, f.bytes, f.ipvsIn, f.ipvsOut)
			results[i] = append(results[i], f)
		}
	}
	t.Log("\n" + fwdBenchTable(variants, results, requests, concurrency, size))
}

var abRate = regexp.MustCompile(`Requests per second:\s+([\d.]+)`)
var abFailed = regexp.MustCompile(`Failed requests:\s+(\d+)`)

// benchRound runs ab once through target and reads the director's
// counters around it.
func (e *fwdEnv) benchRound(t *testing.T, target netip.AddrPort, requests, concurrency, size int) fwdFigures {
	t.Helper()
	before := e.directorCounters(t, target)
	start := time.Now()
	out := e.client.MustExec(t, "ab", "-q", "-n", strconv.Itoa(requests), "-c", strconv.Itoa(concurrency), "-s", "30",
		fmt.Sprintf("http://%s/size/%d", target, size))
	elapsed := time.Since(start)
	m, fm := abRate.FindStringSubmatch(out), abFailed.FindStringSubmatch(out)
	if m == nil || fm == nil {
		t.Fatalf("ab's output has no rate or failure count:\n%s", out)
	}
	if fm[1] != "0" {
		t.Fatalf("%s of %d requests failed through %s:\n%s", fm[1], requests, target, out)
	}
	after := e.directorCounters(t, target)
	rps, _ := strconv.ParseFloat(m[1], 64)
	n := float64(requests)
	return fwdFigures{rps: rps, requests: requests, elapsedS: int(elapsed.Seconds()),
		pkts:   float64(after.pkts-before.pkts) / n,
		bytes:  float64(after.bytes-before.bytes) / n,
		ipvsIn: float64(after.in-before.in) / n, ipvsOut: float64(after.out-before.out) / n}
}

// dirCounters is the director's traffic so far: both links, both
// directions, and IPVS's packet counters of one virtual server.
type dirCounters struct{ pkts, bytes, in, out uint64 }

// directorCounters reads them once IPVS's estimator, which folds its
// per-CPU counters into what ipvsadm reads every 2 seconds, has caught up
// (two reads 2.5 s apart agree).
func (e *fwdEnv) directorCounters(t *testing.T, target netip.AddrPort) dirCounters {
	t.Helper()
	in, out := ipvsPackets(t, e.dir, target)
	for {
		time.Sleep(2500 * time.Millisecond)
		in2, out2 := ipvsPackets(t, e.dir, target)
		if in2 == in && out2 == out {
			break
		}
		in, out = in2, out2
	}
	c := dirCounters{in: in, out: out}
	for _, link := range []string{e.tp.Frontend.Name, e.tp.Backend.Name} {
		s := linkStats(t, e.dir.Node, link)
		c.pkts += s.RX.Packets + s.TX.Packets
		c.bytes += s.RX.Bytes + s.TX.Bytes
	}
	return c
}

// fwdBenchTable renders the medians over the rounds, and DR's and IPIP's
// ratios to NAT.
func fwdBenchTable(variants []fwdVariant, results [][]fwdFigures, requests, concurrency, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "==== lbd forwarding benchmark ====\n%d rounds, each: ab -n %d -c %d, %d-byte responses, 2 real servers (rr)\n",
		len(results[0]), requests, concurrency, size)
	fmt.Fprintf(&b, "%-18s %12s %14s %14s %10s %10s\n", "method", "requests/s", "dir pkts/req", "dir bytes/req", "IPVS in", "IPVS out")
	med := func(fs []fwdFigures, get func(fwdFigures) float64) float64 {
		vs := make([]float64, len(fs))
		for i, f := range fs {
			vs[i] = get(f)
		}
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	type row struct{ rps, pkts, bytes float64 }
	rows := make([]row, len(variants))
	for i, v := range variants {
		fs := results[i]
		rows[i] = row{med(fs, func(f fwdFigures) float64 { return f.rps }), med(fs, func(f fwdFigures) float64 { return f.pkts }),
			med(fs, func(f fwdFigures) float64 { return f.bytes })}
		fmt.Fprintf(&b, "%-18s %12.0f %14.1f %14.0f %10.1f %10.1f\n", v.name, rows[i].rps, rows[i].pkts, rows[i].bytes,
			med(fs, func(f fwdFigures) float64 { return f.ipvsIn }), med(fs, func(f fwdFigures) float64 { return f.ipvsOut }))
	}
	for i := 1; i < len(variants); i++ {
		fmt.Fprintf(&b, "%s/nat: director bytes per request %.2f, packets %.2f, requests/s %.2f\n", variants[i].name,
			rows[i].bytes/rows[0].bytes, rows[i].pkts/rows[0].pkts, rows[i].rps/rows[0].rps)
	}
	b.WriteString("==== end of lbd forwarding benchmark ====")
	return b.String()
}
