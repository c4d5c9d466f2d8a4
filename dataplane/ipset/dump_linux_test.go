package ipset

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/internal/testnetns"
	"github.com/lbdproject/lbd/lvs"
)

// kernelIn opens a NetlinkKernel in a fresh namespace.
func kernelIn(t *testing.T) (string, *NetlinkKernel) {
	t.Helper()
	testnetns.Require(t, "ipset")
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := OpenKernelIn(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	return ns, k
}

// restore feeds ipset restore lines in the namespace (much faster than
// one netlink request per entry).
func restore(t *testing.T, ns, lines string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "ipset", "restore")
	cmd.Stdin = strings.NewReader(lines)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ipset restore: %v: %s", err, out)
	}
}

// randomEntries makes n distinct entries of the spec's type and family,
// with host and shorter networks, TCP, UDP and SCTP.
func randomEntries(r *rand.Rand, spec desired.SetSpec, n int) []desired.SetEntry {
	ip := func() netip.Addr {
		if spec.Family == 6 {
			var b [16]byte
			b[0], b[1], b[2], b[3] = 0x20, 0x01, 0x0d, 0xb8
			for i := 4; i < 16; i++ {
				b[i] = byte(r.UintN(256))
			}
			b[15] |= 1
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{10, byte(r.UintN(256)), byte(r.UintN(256)), 1 + byte(r.UintN(255))})
	}
	net := func() netip.Prefix {
		a := ip()
		if r.IntN(3) == 0 {
			return netip.PrefixFrom(a, a.BitLen()) // a host: /32, /128
		}
		return netip.PrefixFrom(a, 8+r.IntN(a.BitLen()-8)).Masked()
	}
	seen := map[desired.SetEntry]bool{}
	out := make([]desired.SetEntry, 0, n)
	for len(out) < n {
		var e desired.SetEntry
		switch spec.Type {
		case desired.HashIP:
			e.IP = ip()
		case desired.HashNet:
			e.Net = net()
		default:
			protos := lvs.Protocols()
			e.IP, e.Port, e.Proto = ip(), uint16(1+r.IntN(65535)), protos[r.IntN(len(protos))]
			switch spec.Type {
			case desired.HashIPPortIP:
				e.IP2 = ip()
			case desired.HashIPPortNT:
				e.Net = net()
			}
			if spec.SkbInfo {
				e.Mark = 1 + r.Uint32N(0xfffffffe)
			}
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	return out
}

// fill creates every lbd set and fills it with size(spec) random entries,
// returning them by set name.
func fill(t *testing.T, ns string, k *NetlinkKernel, size func(desired.SetSpec) int, extra string) map[string][]desired.SetEntry {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	want := map[string][]desired.SetEntry{}
	var b strings.Builder
	b.WriteString(extra)
	for _, spec := range desired.SetSpecs() {
		if err := k.Create(spec); err != nil {
			t.Fatal(err)
		}
		es := randomEntries(r, spec, size(spec))
		want[spec.Name] = es
		for _, e := range es {
			fmt.Fprintf(&b, "add %s %s\n", spec.Name, e)
		}
	}
	restore(t, ns, b.String())
	return want
}

// ipsetText is how ipset list prints e: host networks without a length.
func ipsetText(e desired.SetEntry) string {
	s := e.String()
	if e.Net.IsValid() && e.Net.IsSingleIP() {
		s = strings.TrimSuffix(s, fmt.Sprintf("/%d", e.Net.Bits()))
	}
	return s
}

func sorted(es []desired.SetEntry) []desired.SetEntry {
	return slices.SortedFunc(slices.Values(es), desired.SetEntry.Compare)
}

// firstDiff describes where two sorted lists differ.
func firstDiff[E comparable](got, want []E) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("%d got, %d want; first difference at %d: got %v, want %v", len(got), len(want), i, got[i], want[i])
		}
	}
	return fmt.Sprintf("%d got, %d want", len(got), len(want))
}

func TestDumpOnTheKernel(t *testing.T) {
	ns, k := kernelIn(t)
	var extra strings.Builder
	extra.WriteString("create THEIRS hash:ip\ncreate LBD-OLD hash:net family inet6\nadd LBD-OLD 2001:db8::/32\n")
	for i := range 1000 {
		fmt.Fprintf(&extra, "add THEIRS 198.18.%d.%d\n", i/250, i%250+1)
	}
	want := fill(t, ns, k, func(spec desired.SetSpec) int {
		switch spec.Name {
		case "LBD-SRC-RANGES", "LBD6-LOOPBACK":
			return 50000 // several hundred netlink messages
		case "LBD6-VIPS":
			return 0
		}
		return 300
	}, extra.String())

	got := map[string][]desired.SetEntry{}
	headers := map[string]string{}
	err := k.Dump(func(name string, typ desired.SetType, family int) func(desired.SetEntry) {
		if _, dup := headers[name]; dup {
			t.Errorf("set %s listed twice", name)
		}
		headers[name] = fmt.Sprintf("%s family %d", typ, family)
		return func(e desired.SetEntry) { got[name] = append(got[name], e) }
	})
	if err != nil {
		t.Fatal(err)
	}
	// LBD-OLD is not one of lbd's names: not lbd's, not listed.
	wantHeaders := map[string]string{}
	for _, spec := range desired.SetSpecs() {
		wantHeaders[spec.Name] = fmt.Sprintf("%s family %d", ListedType(spec), spec.Family)
	}
	if fmt.Sprint(headers) != fmt.Sprint(wantHeaders) {
		t.Errorf("sets listed:\n%v\nwant (no THEIRS, no LBD-OLD):\n%v", headers, wantHeaders)
	}
	old, err := oldDump(k)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range desired.SetSpecs() {
		g := sorted(got[spec.Name])
		if w := sorted(want[spec.Name]); !slices.Equal(g, w) {
			t.Errorf("%s: not the entries added: %s", spec.Name, firstDiff(g, w))
		}
		// Exactly as the old dump through vishvananda's IPSetEntry made
		// them, so that a full sync with nothing to change writes nothing
		// (but for the marks, which it cannot read).
		unmarked := slices.Clone(g)
		for i := range unmarked {
			unmarked[i].Mark = 0
		}
		if o := sorted(old[spec.Name].Entries); !slices.Equal(unmarked, o) {
			t.Errorf("%s: not as the old dump read them: %s", spec.Name, firstDiff(unmarked, o))
		}
		// And as ipset prints them.
		var printed []string
		if _, members, ok := strings.Cut(testnetns.Run(t, ns, "ipset", "list", spec.Name), "Members:\n"); ok {
			printed = strings.Fields(members)
		}
		var texts []string
		for _, e := range g {
			texts = append(texts, strings.Fields(ipsetText(e))...)
		}
		slices.Sort(printed)
		slices.Sort(texts)
		if !slices.Equal(texts, printed) {
			t.Errorf("%s: not as ipset list prints them: %s", spec.Name, firstDiff(texts, printed))
		}
	}

	// A set destroyed between the headers and its entries is just absent;
	// the socket then serves the next dump.
	n := 0
	err = k.Dump(func(name string, _ desired.SetType, _ int) func(desired.SetEntry) {
		if name != "LBD-VIPS" {
			return nil
		}
		testnetns.Run(t, ns, "ipset", "destroy", "LBD-VIPS")
		return func(desired.SetEntry) { n++ }
	})
	if err != nil || n != 0 {
		t.Errorf("dump with LBD-VIPS destroyed meanwhile: %d entries, %v; want none, no error", n, err)
	}
	sizes := map[string]int{}
	if err := k.Dump(func(name string, _ desired.SetType, _ int) func(desired.SetEntry) {
		return func(desired.SetEntry) { sizes[name]++ }
	}); err != nil {
		t.Fatal(err)
	}
	if sizes["LBD-VIPS"] != 0 || sizes["LBD-SRC-RANGES"] != 50000 {
		t.Errorf("next dump: %v", sizes)
	}
}

// TestDumpMemory compares the memory of dumping ~200,000 entries through
// vishvananda's IpsetListAll (the old Dump) and the streaming Dump.
// LBD_IPSET_DUMP_MEMORY=1 runs it.
func TestDumpMemory(t *testing.T) {
	if os.Getenv("LBD_IPSET_DUMP_MEMORY") == "" {
		t.Skip("LBD_IPSET_DUMP_MEMORY=1 measures")
	}
	const total = 200000
	ns, k := kernelIn(t)
	fill(t, ns, k, func(desired.SetSpec) int { return total / int(desired.NumSets) }, "")
	old := func() int {
		m, err := oldDump(k)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range m {
			n += len(s.Entries)
		}
		return n
	}
	streaming := func() int {
		n := 0
		err := k.Dump(func(string, desired.SetType, int) func(desired.SetEntry) {
			return func(desired.SetEntry) { n++ }
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name string
		f    func() int
	}{{"old (IpsetListAll)", old}, {"streaming", streaming}, {"old (IpsetListAll)", old}, {"streaming", streaming}} {
		m := measure(c.f)
		t.Logf("%-20s %d entries in %v: %6.1f MB allocated in %d objects, peak heap +%.1f MB",
			c.name, m.n, m.took.Round(time.Millisecond), float64(m.alloc)/1e6, m.objects, float64(m.peak)/1e6)
	}
}

type measured struct {
	n                    int
	took                 time.Duration
	alloc, objects, peak uint64
}

// measure runs f after a collection, sampling the heap (live and not yet
// swept objects, what the process must map) as often as it can meanwhile.
func measure(f func() int) measured {
	heap := func(s []metrics.Sample) uint64 {
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	base := heap(sample)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var max uint64
		for {
			select {
			case <-stop:
				peak <- max
				return
			default:
			}
			if v := heap(s); v > max {
				max = v
			}
			runtime.Gosched()
		}
	}()
	start := time.Now()
	n := f()
	took := time.Since(start)
	close(stop)
	p := <-peak
	runtime.ReadMemStats(&after)
	return measured{n: n, took: took, alloc: after.TotalAlloc - before.TotalAlloc, objects: after.Mallocs - before.Mallocs, peak: max(p, base) - base}
}

// oldSet and oldDump are the Dump this package had, through
// vishvananda's IpsetListAll: the baseline of TestDumpMemory and the
// reference of how entries must come out.
type oldSet struct {
	Type    desired.SetType
	Family  int
	Entries []desired.SetEntry
}

func oldDump(k *NetlinkKernel) (map[string]oldSet, error) {
	all, err := k.h.IpsetListAll()
	if err != nil {
		return nil, err
	}
	out := map[string]oldSet{}
	for _, r := range all {
		if !IsLBD(r.SetName) {
			continue
		}
		s := out[r.SetName]
		if r.TypeName != "" {
			s.Type = desired.SetType(r.TypeName)
			s.Family = 4
			if r.Family == unix.AF_INET6 {
				s.Family = 6
			}
		}
		for _, e := range r.Entries {
			se, err := fromNetlink(s.Type, e)
			if err != nil {
				return nil, fmt.Errorf("ipset %s: %w", r.SetName, err)
			}
			s.Entries = append(s.Entries, se)
		}
		out[r.SetName] = s
	}
	return out, nil
}

func fromNetlink(t desired.SetType, n netlink.IPSetEntry) (desired.SetEntry, error) {
	ip, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return desired.SetEntry{}, fmt.Errorf("entry without an address: %+v", n)
	}
	ip = ip.Unmap()
	var e desired.SetEntry
	switch t {
	case desired.HashNet:
		bits := int(n.CIDR)
		if bits == 0 {
			bits = ip.BitLen()
		}
		e.Net = netip.PrefixFrom(ip, bits)
		return e, nil
	case desired.HashIP:
		e.IP = ip
		return e, nil
	}
	e.IP = ip
	if n.Port != nil && n.Protocol != nil {
		e.Port, e.Proto = *n.Port, entryProto(*n.Protocol)
	}
	ip2, ok := netip.AddrFromSlice(n.IP2)
	switch {
	case t == desired.HashIPPortIP && ok:
		e.IP2 = ip2.Unmap()
	case t == desired.HashIPPortNT && ok:
		bits := int(n.CIDR2)
		if bits == 0 {
			bits = ip2.Unmap().BitLen()
		}
		e.Net = netip.PrefixFrom(ip2.Unmap(), bits)
	}
	return e, nil
}
