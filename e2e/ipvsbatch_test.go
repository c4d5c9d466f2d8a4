//go:build e2e

package e2e

// NetlinkKernel.AddServices, the IPVS applier's batch path for a cold sync:
// TestIPVSBatch checks what it creates against ipvsadm -Sn, errors
// included; TestIPVSBatchBench (LBD_E2E_BENCH=1) times it against
// ipvsadm -R, the per-object path and other ways of writing.
//
// Both run the writing in a fresh namespace through the test binary
// started again there with ipvsBatchRoleEnv set; init below runs that role
// before TestMain (whose own role runners do not know it).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mobyipvs "github.com/moby/ipvs"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

const ipvsBatchRoleEnv = "LBD_E2E_IPVSBATCH_ROLE"

// ipvsBatchReq is what the role is asked: write Services (a JSON file) in
// one way and report.
type ipvsBatchReq struct {
	Services string // JSON file of []ipvs.Service
	Rules    string // ipvsadm -R input, for Method "ipvsadm"
	// Method: "ipvsadm" (ipvsadm -R), "seq" (NetlinkKernel.AddService and
	// AddDest, one call per object, as the applier did), "moby" (Handles
	// moby/ipvs handles on as many goroutines), "batch" (AddServicesWith
	// Opts), "dump" (write nothing, read the table back).
	Method  string
	Handles int
	Opts    ipvs.BatchOptions
}

type ipvsBatchRes struct {
	Elapsed  time.Duration
	Errors   []string // per service; "" when it was created whole
	Services int      // what /proc/net/ip_vs then holds
	Dests    int
	Dump     []ipvs.Service // NetlinkKernel.Dump's answer, for Method "dump"
}

func init() {
	if os.Getenv(ipvsBatchRoleEnv) == "" {
		return
	}
	var req ipvsBatchReq
	res, err := func() (*ipvsBatchRes, error) {
		if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
			return nil, err
		}
		return ipvsBatchRole(req)
	}()
	if err == nil {
		err = json.NewEncoder(os.Stdout).Encode(res)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", ipvsBatchRoleEnv, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func ipvsBatchRole(req ipvsBatchReq) (*ipvsBatchRes, error) {
	var svcs []ipvs.Service
	b, err := os.ReadFile(req.Services)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, &svcs); err != nil {
		return nil, err
	}
	res := &ipvsBatchRes{Errors: make([]string, len(svcs))}
	var errs []error
	var start time.Time
	switch req.Method {
	case "ipvsadm":
		in, err := os.Open(req.Rules)
		if err != nil {
			return nil, err
		}
		defer in.Close()
		cmd := exec.Command("ipvsadm", "-R")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = in, os.Stderr, os.Stderr
		start = time.Now()
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("ipvsadm -R: %w", err)
		}
	case "seq":
		k, err := ipvs.OpenKernel()
		if err != nil {
			return nil, err
		}
		defer k.Close()
		start = time.Now()
		errs = make([]error, len(svcs))
		for i, s := range svcs {
			if err := k.AddService(s); err != nil {
				errs[i] = fmt.Errorf("adding virtual server %s: %w", s.Key, err)
				continue
			}
			for _, d := range s.Dests {
				if err := k.AddDest(s.Key, d); err != nil {
					errs[i] = errors.Join(errs[i], fmt.Errorf("adding real server %s to %s: %w", d.Addr, s.Key, err))
				}
			}
		}
	case "moby":
		start = time.Now()
		errs, err = mobyParallel(svcs, req.Handles)
		if err != nil {
			return nil, err
		}
	case "batch":
		k, err := ipvs.OpenKernel()
		if err != nil {
			return nil, err
		}
		defer k.Close()
		start = time.Now()
		errs = k.AddServicesWith(svcs, req.Opts)
	case "dump":
		k, err := ipvs.OpenKernel()
		if err != nil {
			return nil, err
		}
		defer k.Close()
		if res.Dump, err = k.Dump(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown method %q", req.Method)
	}
	res.Elapsed = time.Since(start)
	for i, err := range errs {
		if err != nil {
			res.Errors[i] = err.Error()
		}
	}
	res.Services, res.Dests, err = countProcIPVS()
	return res, err
}

// mobyParallel is candidate 1: n moby/ipvs handles (each its own socket),
// one goroutine each, taking services one at a time.
func mobyParallel(svcs []ipvs.Service, n int) ([]error, error) {
	errs := make([]error, len(svcs))
	var next atomic.Int64
	var wg sync.WaitGroup
	handles := make([]*mobyipvs.Handle, max(n, 1))
	for i := range handles {
		h, err := mobyipvs.New("")
		if err != nil {
			return nil, err
		}
		defer h.Close()
		handles[i] = h
	}
	for _, h := range handles {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(svcs) {
					return
				}
				s := svcs[i]
				ms := mobyService(s)
				if err := h.NewService(ms); err != nil {
					errs[i] = fmt.Errorf("adding virtual server %s: %w", s.Key, err)
					continue
				}
				for _, d := range s.Dests {
					md := &mobyipvs.Destination{Address: net.IP(d.Addr.Addr().AsSlice()), Port: d.Addr.Port(), Weight: d.Weight,
						ConnectionFlags: mobyipvs.ConnectionFlagMasq, AddressFamily: ms.AddressFamily}
					if err := h.NewDestination(ms, md); err != nil {
						errs[i] = errors.Join(errs[i], fmt.Errorf("adding real server %s to %s: %w", d.Addr, s.Key, err))
					}
				}
			}
		})
	}
	wg.Wait()
	return errs, nil
}

func mobyService(s ipvs.Service) *mobyipvs.Service {
	m := &mobyipvs.Service{Address: net.IP(s.Key.Addr.AsSlice()), Port: s.Key.Port, SchedName: s.Scheduler,
		Flags: s.Flags, Timeout: s.Timeout, Netmask: s.Netmask, AddressFamily: syscall.AF_INET, Protocol: syscall.IPPROTO_TCP}
	if s.Key.Addr.Is6() {
		m.AddressFamily = syscall.AF_INET6
	}
	if s.Key.Protocol == lvs.UDP {
		m.Protocol = syscall.IPPROTO_UDP
	}
	return m
}

func toKernelServices(ds []desired.Service) []ipvs.Service {
	out := make([]ipvs.Service, len(ds))
	for i, s := range ds {
		out[i] = ipvs.Service{Key: s.Key, Scheduler: s.Scheduler, Flags: s.Flags, Timeout: s.Timeout, Netmask: s.Netmask}
		for _, d := range s.Dests {
			out[i].Dests = append(out[i].Dests, ipvs.Dest{Addr: d.Addr, Weight: d.Weight})
		}
	}
	return out
}

// batchNetns is a fresh namespace with lo up and a dummy link routing the
// IPv4 real servers (198.19.0.0/16) and holding an IPv6 prefix.
type batchNetns struct{ name string }

var batchNetnsCount atomic.Int64

func newBatchNetns(t *testing.T) *batchNetns {
	t.Helper()
	ns := &batchNetns{name: fmt.Sprintf("ipvsbatch%d-%d", os.Getpid(), batchNetnsCount.Add(1))}
	addBenchNetns(t, ns.name, true)
	return ns
}

func (ns *batchNetns) drop(t *testing.T) {
	t.Helper()
	mustRun(t, "ip", "netns", "del", ns.name)
}

func (ns *batchNetns) exec(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (ns *batchNetns) role(t *testing.T, req ipvsBatchReq) ipvsBatchRes {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", ns.name, self)
	cmd.Env = append(os.Environ(), ipvsBatchRoleEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s in %s: %v\n%s", req.Method, ns.name, err, stderr.String())
	}
	var res ipvsBatchRes
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%s: reading %q: %v\n%s", req.Method, stdout.String(), err, stderr.String())
	}
	return res
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func ipvsRules(t *testing.T, svcs []desired.Service) string {
	t.Helper()
	var b strings.Builder
	if err := desired.WriteIPVS(&b, desired.State{Services: svcs}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func key(addr string, port uint16, proto lvs.Protocol) lvs.Key {
	return lvs.Key{Addr: netip.MustParseAddr(addr), Port: port, Protocol: proto}
}

func dests(weights map[string]int, order ...string) []desired.Dest {
	var out []desired.Dest
	for _, a := range order {
		out = append(out, desired.Dest{Addr: netip.MustParseAddrPort(a), Weight: weights[a]})
	}
	return out
}

// TestIPVSBatch creates virtual servers of every kind lbd makes with
// AddServices, under several batching options, and compares the kernel's
// table (ipvsadm -Sn) with what was asked, line by line. One service exists
// beforehand (its error only; its destinations are not added to it), and
// one service has a multicast destination (EINVAL) and one twice (EEXIST):
// errors for those only, its other destinations are created. One service
// asks for a scheduler no kernel has: ENOENT, reported as a missing module.
func TestIPVSBatch(t *testing.T) {
	requireIPVSForBatch(t)
	good := []desired.Service{
		{Key: key("198.18.0.1", 80, lvs.TCP), Scheduler: "wrr", Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.1:8080": 1, "198.19.0.2:8080": 2, "198.19.0.3:8081": 3},
				"198.19.0.1:8080", "198.19.0.2:8080", "198.19.0.3:8081")},
		{Key: key("198.18.0.2", 53, lvs.UDP), Scheduler: "rr", Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.4:53": 1, "198.19.0.5:53": 0}, "198.19.0.4:53", "198.19.0.5:53")},
		{Key: key("198.18.0.3", 443, lvs.TCP), Scheduler: "sh", Flags: desired.FlagSched1 | desired.FlagSched2, Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.6:443": 7}, "198.19.0.6:443")},
		{Key: key("198.18.0.6", 443, lvs.TCP), Scheduler: "wrr", Flags: desired.FlagPersistent, Timeout: 300, Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.7:443": 4}, "198.19.0.7:443")},
		// Persistence and sh flags together: ipvsadm -Sn prints -p before -b.
		{Key: key("198.18.0.7", 443, lvs.TCP), Scheduler: "sh", Flags: desired.FlagSched1 | desired.FlagPersistent, Timeout: 300, Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.8:443": 2}, "198.19.0.8:443")},
		{Key: key("198.18.0.5", 5060, lvs.UDP), Scheduler: "lc", Flags: desired.FlagPersistent, Timeout: 1800, Netmask: 0xffffffff,
			Dests: dests(map[string]int{"198.19.0.9:5060": 1}, "198.19.0.9:5060")},
		{Key: key("2001:db8::10", 80, lvs.TCP), Scheduler: "wlc", Netmask: 128,
			Dests: dests(map[string]int{"[2001:db8:19::1]:8080": 5, "[2001:db8:19::2]:8080": 1},
				"[2001:db8:19::1]:8080", "[2001:db8:19::2]:8080")},
		{Key: key("2001:db8::11", 53, lvs.UDP), Scheduler: "rr", Flags: desired.FlagPersistent, Timeout: 600, Netmask: 128,
			Dests: dests(map[string]int{"[2001:db8:19::3]:53": 2}, "[2001:db8:19::3]:53")},
		{Key: key("2001:db8::12", 443, lvs.TCP), Scheduler: "sh", Netmask: 128}, // no destinations
	}
	existing := desired.Service{Key: key("198.18.0.9", 80, lvs.TCP), Scheduler: "rr", Netmask: 0xffffffff,
		Dests: dests(map[string]int{"198.19.0.30:80": 1}, "198.19.0.30:80")}
	// A multicast destination (EINVAL) and a repeated one (EEXIST).
	badDests := desired.Service{Key: key("198.18.0.4", 80, lvs.TCP), Scheduler: "rr", Netmask: 0xffffffff,
		Dests: dests(map[string]int{"198.19.0.20:80": 1, "224.0.0.5:80": 1, "198.19.0.21:80": 2},
			"198.19.0.20:80", "224.0.0.5:80", "198.19.0.21:80", "198.19.0.20:80")}

	// Asked: good services, then the existing one, the bad destinations,
	// more good ones.
	ask := slices.Clone(good[:5])
	ask = append(ask, existing, badDests)
	ask = append(ask, good[5:]...)
	// No module ip_vs_nosuch: the kernel answers ENOENT; not created.
	ask = append(ask, desired.Service{Key: key("198.18.0.8", 80, lvs.TCP), Scheduler: "nosuch", Netmask: 0xffffffff,
		Dests: dests(map[string]int{"198.19.0.40:80": 1}, "198.19.0.40:80")})
	wantErr := map[int]string{
		5: "adding virtual server 198.18.0.9:80/tcp: file exists",
		6: "adding real server 224.0.0.5:80 to 198.18.0.4:80/tcp: invalid argument\n" +
			"adding real server 198.19.0.20:80 to 198.18.0.4:80/tcp: file exists",
		len(ask) - 1: `adding virtual server 198.18.0.8:80/tcp: scheduler "nosuch" is not available in the kernel: ` +
			"load module ip_vs_nosuch (modprobe ip_vs_nosuch): no such file or directory",
	}
	// Expected table: the good ones, the one with bad destinations with
	// its good ones, the existing one as it was made.
	want := slices.Clone(good)
	b := badDests
	b.Dests = dests(map[string]int{"198.19.0.20:80": 1, "198.19.0.21:80": 2}, "198.19.0.20:80", "198.19.0.21:80")
	want = append(want, b, desired.Service{Key: existing.Key, Scheduler: existing.Scheduler, Netmask: 0xffffffff})
	wantLines := sortedLines(ipvsRules(t, want))

	dir := t.TempDir()
	svcFile := filepath.Join(dir, "services.json")
	writeJSON(t, svcFile, toKernelServices(ask))
	for _, o := range []ipvs.BatchOptions{
		{}, // AddServices' defaults
		{Workers: 2, PerSend: 2},
		{Workers: 1, PerSend: 3, AckEach: true},
	} {
		t.Run(fmt.Sprintf("workers=%d,persend=%d,ackeach=%v", o.Workers, o.PerSend, o.AckEach), func(t *testing.T) {
			ns := newBatchNetns(t)
			defer ns.drop(t)
			ns.exec(t, "ipvsadm", "-A", "-t", "198.18.0.9:80", "-s", "rr")
			res := ns.role(t, ipvsBatchReq{Services: svcFile, Method: "batch", Opts: o})
			for i, got := range res.Errors {
				if got != wantErr[i] {
					t.Errorf("service %s: error %q, want %q", ask[i].Key, got, wantErr[i])
				}
			}
			got := sortedLines(ns.exec(t, "ipvsadm", "-Sn"))
			if !slices.Equal(got, wantLines) {
				t.Errorf("ipvsadm -Sn:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantLines, "\n"))
			}
		})
	}
}

func requireIPVSForBatch(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		if os.Getenv("LBD_E2E_REQUIRE") == "1" {
			t.Fatalf("no IPVS: %v", err)
		}
		t.Skipf("no IPVS: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// ipvsBatchCandidate is one way of writing, as the benchmark names it.
type ipvsBatchCandidate struct {
	name string
	req  ipvsBatchReq
}

func parseBatchCandidate(s string) (ipvsBatchCandidate, error) {
	c := ipvsBatchCandidate{name: s}
	switch {
	case s == "ipvsadm" || s == "seq":
		c.req.Method = s
	case strings.HasPrefix(s, "moby"): // mobyN: N handles
		n, err := strconv.Atoi(strings.TrimPrefix(s, "moby"))
		if err != nil {
			return c, fmt.Errorf("candidate %q: %w", s, err)
		}
		c.req.Method, c.req.Handles = "moby", n
	case s == "batch": // AddServices' defaults
		c.req.Method = "batch"
	case strings.HasPrefix(s, "batch"): // batchWxP[ack]: W workers, P per send
		spec := strings.TrimPrefix(s, "batch")
		spec, ack := strings.CutSuffix(spec, "ack")
		ws, ps, ok := strings.Cut(spec, "x")
		w, err1 := strconv.Atoi(ws)
		p, err2 := strconv.Atoi(ps)
		if !ok || err1 != nil || err2 != nil {
			return c, fmt.Errorf("candidate %q: want batchWxP or batchWxPack", s)
		}
		c.req.Method, c.req.Opts = "batch", ipvs.BatchOptions{Workers: w, PerSend: p, AckEach: ack}
	default:
		return c, fmt.Errorf("unknown candidate %q", s)
	}
	return c, nil
}

// TestIPVSBatchBench times a cold load of N services × reals (defaults 2000
// × 10) in a fresh namespace each time: ipvsadm -R of the same rules, the
// per-object path, and the candidates of LBD_E2E_IPVSBATCH_CANDIDATES,
// alternating, LBD_E2E_BENCH_ROUNDS rounds; it prints medians and ratios to
// ipvsadm -R.
func TestIPVSBatchBench(t *testing.T) {
	if os.Getenv(benchEnv) != "1" {
		t.Skip("a benchmark: set " + benchEnv + "=1")
	}
	requireIPVSForBatch(t)
	p := benchParams{services: 2000, reals: 10, rounds: 3}
	for env, v := range map[string]*int{benchServicesEnv: &p.services, benchRealsEnv: &p.reals, benchRoundsEnv: &p.rounds} {
		if s := os.Getenv(env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q", env, s)
			}
			*v = n
		}
	}
	names := "ipvsadm,seq,batch"
	if s := os.Getenv("LBD_E2E_IPVSBATCH_CANDIDATES"); s != "" {
		names = s
	}
	var cands []ipvsBatchCandidate
	for _, n := range strings.Split(names, ",") {
		c, err := parseBatchCandidate(strings.TrimSpace(n))
		if err != nil {
			t.Fatal(err)
		}
		cands = append(cands, c)
	}
	if !slices.ContainsFunc(cands, func(c ipvsBatchCandidate) bool { return c.name == "ipvsadm" }) {
		cands = append([]ipvsBatchCandidate{{name: "ipvsadm", req: ipvsBatchReq{Method: "ipvsadm"}}}, cands...)
	}

	// The services of benchConfig: VIP i, TCP 80, wrr, distinct real servers.
	svcs := make([]desired.Service, p.services)
	for i := range svcs {
		s := desired.Service{Key: lvs.Key{Addr: addrPlus(benchVIPBase, i), Port: 80, Protocol: lvs.TCP}, Scheduler: "wrr", Netmask: 0xffffffff}
		for j := range p.reals {
			k := i*p.reals + j
			s.Dests = append(s.Dests, desired.Dest{
				Addr:   netip.AddrPortFrom(addrPlus(benchRealBase, k%benchRealAddrs), uint16(benchRealPort+k/benchRealAddrs)),
				Weight: 1 + j%3,
			})
		}
		svcs[i] = s
	}
	dir := t.TempDir()
	svcFile, rules := filepath.Join(dir, "services.json"), filepath.Join(dir, "rules.ipvsadm")
	writeJSON(t, svcFile, toKernelServices(svcs))
	if err := os.WriteFile(rules, []byte(ipvsRules(t, svcs)), 0o644); err != nil {
		t.Fatal(err)
	}

	times := map[string][]time.Duration{}
	for r := 1; r <= p.rounds; r++ {
		for _, c := range cands {
			ns := newBatchNetns(t)
			if err := waitIdle(3 * time.Minute); err != nil {
				t.Logf("not idle: %v", err)
			}
			req := c.req
			req.Services, req.Rules = svcFile, rules
			res := ns.role(t, req)
			for i, e := range res.Errors {
				if e != "" {
					t.Fatalf("%s: service %d: %s", c.name, i, e)
				}
			}
			if res.Services != p.services || res.Dests != p.services*p.reals {
				t.Fatalf("%s: the kernel holds %d services and %d destinations, want %d and %d",
					c.name, res.Services, res.Dests, p.services, p.services*p.reals)
			}
			t.Logf("round %d: %-14s %v", r, c.name, res.Elapsed)
			times[c.name] = append(times[c.name], res.Elapsed)
			ns.drop(t)
			if err := waitIdle(3 * time.Minute); err != nil {
				t.Logf("not idle after deleting the namespace: %v", err)
			}
		}
	}
	ref := median(times["ipvsadm"])
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== IPVS cold load: %d services × %d = %d objects, %d rounds (medians) ====\n",
		p.services, p.reals, p.services*(p.reals+1), p.rounds)
	for _, c := range cands {
		ts := times[c.name]
		fmt.Fprintf(&b, "%-16s %9s  %5.2f× ipvsadm -R   rounds: %s\n", c.name, secs(median(ts)), median(ts).Seconds()/ref.Seconds(), fmtDurations(ts))
	}
	b.WriteString("==== end of IPVS cold load ====\n")
	fmt.Print(b.String())
}
