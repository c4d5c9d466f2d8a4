//go:build e2e

package e2e

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Markers of the profile on the console; scripts/bench.sh looks for them.
const (
	profileBegin = "==== lbd bench cpu profile (base64) ===="
	profileEnd   = "==== end of lbd bench cpu profile ===="
	heapBegin    = "==== lbd run heap profile (base64) ===="
	heapEnd      = "==== end of lbd run heap profile ===="
)

// statusSocket is where lbd run answers: benchConfig leaves [status] at
// its default.
const statusSocket = "/run/lbd/lbd.sock"

// printProfile prints a profile file base64-encoded between markers: the
// guest's files vanish with it, its console does not.
func printProfile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	printBase64(profileBegin, profileEnd, data)
}

func printBase64(begin, end string, data []byte) {
	enc := base64.StdEncoding.EncodeToString(data)
	var b strings.Builder
	b.WriteString(begin + "\n")
	for len(enc) > 0 {
		n := min(len(enc), 76)
		b.WriteString(enc[:n] + "\n")
		enc = enc[n:]
	}
	b.WriteString(end + "\n")
	fmt.Print(b.String())
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitIdle waits until the CPUs were at least 90 % idle over half a second
// (from /proc/stat), or limit passes.
func waitIdle(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	prevIdle, prevTotal, err := cpuTimes()
	if err != nil {
		return err
	}
	for {
		time.Sleep(500 * time.Millisecond)
		idle, total, err := cpuTimes()
		if err != nil {
			return err
		}
		busy := 1 - float64(idle-prevIdle)/float64(max(total-prevTotal, 1))
		if busy < 0.10 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still %.0f %% busy", 100*busy)
		}
		prevIdle, prevTotal = idle, total
	}
}

// cpuTimes returns idle (with iowait) and total jiffies of all CPUs.
func cpuTimes() (idle, total uint64, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	for i, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total, nil
}

// memWatch records the lowest MemAvailable of the machine while the
// benchmark runs, to show the guest had memory to spare.
type memWatch struct {
	done     chan struct{}
	stopped  chan struct{}
	totalKiB int
	lowKiB   int
	once     sync.Once
}

type memFigures struct{ TotalKiB, LowestAvailableKiB int }

func watchMemory() *memWatch {
	w := &memWatch{done: make(chan struct{}), stopped: make(chan struct{}), lowKiB: -1}
	w.totalKiB, _ = meminfoKiB("MemTotal")
	go func() {
		defer close(w.stopped)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			if a, err := meminfoKiB("MemAvailable"); err == nil && (w.lowKiB < 0 || a < w.lowKiB) {
				w.lowKiB = a
			}
			select {
			case <-w.done:
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

func (w *memWatch) stop() memFigures {
	w.once.Do(func() { close(w.done) })
	<-w.stopped
	return memFigures{TotalKiB: w.totalKiB, LowestAvailableKiB: w.lowKiB}
}

func meminfoKiB(field string) (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return statusField(f, field)
}

// ---------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func medianInt(xs []int) int {
	s := slices.Sorted(slices.Values(xs))
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func collect[T, V any](xs []T, f func(T) V) []V {
	out := make([]V, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func secs(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

const (
	reportBegin = "==== lbd dataplane benchmark ===="
	reportEnd   = "==== end of lbd dataplane benchmark ===="
)

func benchReport(p benchParams, lbd []lbdRoundResult, restore []restoreResult, rss rssResult, mem memFigures, quiesced []time.Duration) string {
	var b strings.Builder
	osRelease, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	clock, _ := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	fmt.Fprintf(&b, "\n%s\n", reportBegin)
	fmt.Fprintf(&b, "size: %d services × %d real servers = %d destinations, %d VIPs; %d rounds (medians); %s\n",
		p.services, p.reals, p.services*p.reals, p.services, p.rounds, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	vendor, _ := os.ReadFile("/sys/class/dmi/id/sys_vendor")
	product, _ := os.ReadFile("/sys/class/dmi/id/product_name")
	fmt.Fprintf(&b, "machine: %s %s, kernel %s, clocksource %s, %d CPUs, memory %d MiB (lowest available during the run: %d MiB)\n",
		strings.TrimSpace(string(vendor)), strings.TrimSpace(string(product)), strings.TrimSpace(string(osRelease)),
		strings.TrimSpace(string(clock)), runtime.NumCPU(), mem.TotalKiB/1024, mem.LowestAvailableKiB/1024)
	b.WriteString("in e2e/run.sh's VM (QEMU TCG, an emulator) timings compare only as ratios within one run\n\n")

	coldWhole := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Cold.Whole }))
	coldAddrs := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Cold.Addrs }))
	coldIPVS := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Cold.IPVS }))
	coldFilter := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Cold.Filter }))
	restoreT := median(collect(restore, func(r restoreResult) time.Duration { return r.Restore }))
	evWhole := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Weight.Whole }))
	evShares := collect(lbd, func(r lbdRoundResult) time.Duration {
		// the share per round, as a duration of parts per million, so the
		// median helper serves
		return time.Duration(float64(r.Weight.Whole) / float64(r.Cold.Whole) * 1e6)
	})
	evShare := float64(median(evShares)) / 1e6
	evReads := medianInt(collect(lbd, func(r lbdRoundResult) int { return r.Weight.Reads }))
	evWrites := medianInt(collect(lbd, func(r lbdRoundResult) int { return r.Weight.Writes }))
	fullWhole := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Full.Whole }))
	fullIPVS := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.Full.IPVS }))
	fullWrites := medianInt(collect(lbd, func(r lbdRoundResult) int { return r.Full.Writes }))
	saveN := median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.SaveN }))
	ipvsRatio := coldIPVS.Seconds() / restoreT.Seconds()
	wholeRatio := coldWhole.Seconds() / restoreT.Seconds()
	fullRatio := fullWhole.Seconds() / saveN.Seconds()
	peakMiB := float64(rss.PeakKiB) / 1024

	row := func(id, what, value, target, result string) {
		fmt.Fprintf(&b, "%-3s %-52s %12s  %-9s %s\n", id, what, value, target, result)
	}
	row("#", "figure", "value", "target", "result")
	row("1", "cold sync (lbd): addresses", secs(coldAddrs), "", "")
	row("1", "cold sync (lbd): IPVS", secs(coldIPVS), "", "")
	row("1", "cold sync (lbd): packet filter", secs(coldFilter), "", "")
	row("1", "cold sync (lbd): whole", secs(coldWhole), "", "")
	row("1", "ipvsadm -R of the same rules", secs(restoreT), "", "")
	row("1", "IPVS / ipvsadm -R", fmt.Sprintf("%.2f×", ipvsRatio), "≤ 0.40×", verdict(ipvsRatio <= targetIPVSRatio))
	row("1", "whole / ipvsadm -R", fmt.Sprintf("%.2f×", wholeRatio), "≤ 0.50×", verdict(wholeRatio <= targetWholeRatio))
	row("2", "one weight change: kernel reads", strconv.Itoa(evReads), "0", verdict(evReads == 0))
	row("2", "one weight change: kernel writes", strconv.Itoa(evWrites), "≤ 3", verdict(evWrites <= targetEventWrites))
	row("2", "one weight change: sync time", secs(evWhole), "", "")
	row("2", "one weight change / cold sync", fmt.Sprintf("%.2f %%", 100*evShare), "≤ 1 %", verdict(evShare <= targetEventShare))
	row("3", "full reconcile, nothing to change: writes", strconv.Itoa(fullWrites), "0", verdict(fullWrites == 0))
	row("3", "full reconcile, nothing to change: IPVS", secs(fullIPVS), "", "")
	row("3", "full reconcile, nothing to change: whole", secs(fullWhole), "", "")
	row("3", "ipvsadm -Sn of the same table", secs(saveN), "", "")
	row("3", "full reconcile / ipvsadm -Sn", fmt.Sprintf("%.2f×", fullRatio), "≤ 1.00×", verdict(fullRatio <= targetFullRatio))
	row("4", "lbd run: peak RSS (VmHWM)", fmt.Sprintf("%.1f MB", peakMiB), "≤ 150 MB", verdict(peakMiB <= targetPeakRSSMiB))
	row("4", "lbd run: RSS after a periodic full sync", fmt.Sprintf("%.1f MB", float64(rss.RSSKiB)/1024), "", "")
	row("5", fmt.Sprintf("packet filter (lbd run): rules at %d services", p.services), strconv.Itoa(rss.Rules), "", "")
	row("5", fmt.Sprintf("packet filter (lbd run): rules at %d services", smallServices), strconv.Itoa(rss.RulesSmall), "same", verdict(rss.Rules == rss.RulesSmall))
	row("5", fmt.Sprintf("packet filter: ipset members at %d / %d services", p.services, smallServices), fmt.Sprintf("%d / %d", rss.Members, rss.MembersSmall), "", "")
	b.WriteString("(MB = MiB; ratios are of medians, the share in 2 is the median of per-round shares)\n")

	b.WriteString("\nper round (lbd syncs: whole = desired state, then addresses, packet filter and IPVS side by side; IPVS includes the ledger file)\n")
	fmt.Fprintf(&b, "%-5s %-16s %9s %9s %9s %9s %9s %7s %8s   %s\n", "round", "sync", "whole", "addrs", "filter", "IPVS", "ledger", "reads", "writes", "reference")
	for i := range lbd {
		r := lbd[i]
		for _, s := range []struct {
			name string
			f    syncFigures
			ref  string
		}{
			{"cold", r.Cold, "ipvsadm -R " + secs(restore[i].Restore)},
			{"weight change", r.Weight, ""},
			{"full, no change", r.Full, "ipvsadm -Sn " + secs(r.SaveN)},
		} {
			fmt.Fprintf(&b, "%-5d %-16s %9s %9s %9s %9s %9s %7d %8d   %s\n",
				i+1, s.name, secs(s.f.Whole), secs(s.f.Addrs), secs(s.f.Filter), secs(s.f.IPVS), secs(s.f.Ledger), s.f.Reads, s.f.Writes, s.ref)
		}
	}
	fmt.Fprintf(&b, "\nother: config load in the measuring process %s (median); lbd run logged its first sync at %s and the periodic full sync at %s; waits for an idle machine between steps: %s\n",
		secs(median(collect(lbd, func(r lbdRoundResult) time.Duration { return r.ConfigLoad }))),
		secs(rss.FirstSync), secs(rss.FullSync), fmtDurations(quiesced))
	fmt.Fprintf(&b, "%s\n", reportEnd)
	return b.String()
}

func fmtDurations(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, secs(d))
	}
	return strings.Join(parts, ", ")
}
