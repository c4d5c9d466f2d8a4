package ipvs_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/lvs"
)

var (
	web   = lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	dns   = lvs.Key{Addr: netip.MustParseAddr("192.0.2.53"), Port: 53, Protocol: lvs.UDP}
	other = lvs.Key{Addr: netip.MustParseAddr("198.51.100.1"), Port: 80, Protocol: lvs.TCP}
	rs1   = netip.MustParseAddrPort("10.0.0.1:80")
	rs2   = netip.MustParseAddrPort("10.0.0.2:80")
	rs3   = netip.MustParseAddrPort("10.0.0.3:80")
)

// svc builds a desired virtual server with destinations "addr=weight".
func svc(k lvs.Key, sched string, dests ...any) desired.Service {
	s := desired.Service{Key: k, Scheduler: sched, Name: "svc", Source: config.Pos{File: "test"}, DrainTimeout: time.Minute}
	for i := 0; i < len(dests); i += 2 {
		s.Dests = append(s.Dests, desired.Dest{Addr: dests[i].(netip.AddrPort), Weight: dests[i+1].(int)})
	}
	return s
}

type fixture struct {
	k *fakeipvs.Kernel
	l *fakeipvs.Ledger
	a *ipvs.Applier
}

func newFixture() *fixture {
	f := &fixture{k: &fakeipvs.Kernel{}, l: &fakeipvs.Ledger{}}
	f.a = ipvs.New(f.k, f.l)
	return f
}

func (f *fixture) apply(t *testing.T, full bool, want ...desired.Service) ipvs.Result {
	t.Helper()
	res, err := f.a.Apply(want, full)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

func (f *fixture) expect(t *testing.T, want string) {
	t.Helper()
	if got := f.k.String(); got != strings.TrimLeft(want, "\n") {
		t.Errorf("kernel:\n%s\nwant:\n%s", got, strings.TrimLeft(want, "\n"))
	}
}

func TestColdSyncThenMinimalWrites(t *testing.T) {
	f := newFixture()
	want := []desired.Service{svc(web, "wrr", rs1, 3, rs2, 1), svc(dns, "rr", rs3, 1)}
	res := f.apply(t, false, want...)
	if res.Dumps != 1 || res.Writes != 5 {
		t.Errorf("cold sync: %+v; want 1 dump and 5 writes", res.Stats)
	}
	f.expect(t, `
192.0.2.10:80/tcp wrr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=3
  -> 10.0.0.2:80 w=1
192.0.2.53:53/udp rr flags=0x0 timeout=0
  -> 10.0.0.3:80 w=1
`)

	tests := []struct {
		name   string
		full   bool
		want   []desired.Service
		dumps  int
		writes int
	}{
		{"event-driven sync with nothing to change", false, want, 0, 0},
		{"full reconcile with nothing to change", true, want, 1, 0},
		{"one weight change", false, []desired.Service{svc(web, "wrr", rs1, 5, rs2, 1), svc(dns, "rr", rs3, 1)}, 0, 1},
		{"scheduler change", false, []desired.Service{svc(web, "rr", rs1, 5, rs2, 1), svc(dns, "rr", rs3, 1)}, 0, 1},
		{"a real server added", false, []desired.Service{svc(web, "rr", rs1, 5, rs2, 1, rs3, 1), svc(dns, "rr", rs3, 1)}, 0, 1},
	}
	for _, tt := range tests {
		res := f.apply(t, tt.full, tt.want...)
		if res.Dumps != tt.dumps || res.Writes != tt.writes {
			t.Errorf("%s: %+v; want %d dumps, %d writes", tt.name, res.Stats, tt.dumps, tt.writes)
		}
	}
}

func TestFullReconcileRepairsDriftAndLeavesOthersAlone(t *testing.T) {
	f := newFixture()
	want := []desired.Service{svc(web, "wrr", rs1, 3, rs2, 1)}
	f.apply(t, false, want...)
	// Someone else's virtual server, and drift on ours.
	if err := f.k.AddService(ipvs.Service{Key: other, Scheduler: "rr"}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.UpdateDest(web, ipvs.Dest{Addr: rs1, Weight: 9}); err != nil {
		t.Fatal(err)
	}
	if err := f.k.DeleteDest(web, rs2); err != nil {
		t.Fatal(err)
	}
	res := f.apply(t, true, want...)
	if res.Writes != 2 {
		t.Errorf("repair took %d writes; want 2", res.Writes)
	}
	f.expect(t, `
192.0.2.10:80/tcp wrr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=3
  -> 10.0.0.2:80 w=1
198.51.100.1:80/tcp rr flags=0x0 timeout=0
`)
	// ipvsadm -C: everything gone, ours comes back, theirs stays gone.
	if err := f.k.DeleteService(web); err != nil {
		t.Fatal(err)
	}
	f.apply(t, true, want...)
	if !strings.Contains(f.k.String(), "192.0.2.10:80/tcp wrr") {
		t.Errorf("virtual server not restored:\n%s", f.k)
	}
	// Removing all desired services deletes ours only.
	f.apply(t, false)
	f.expect(t, "198.51.100.1:80/tcp rr flags=0x0 timeout=0\n")
	if len(f.l.Keys) != 0 {
		t.Errorf("ledger still owns %v", f.l.Keys)
	}
}

func TestRestartAdoptsWhatIsRight(t *testing.T) {
	f := newFixture()
	want := []desired.Service{svc(web, "wrr", rs1, 3, rs2, 1)}
	f.apply(t, false, want...)
	ledgerWrites := f.l.Writes
	// A new process: new applier over the same kernel and ledger.
	restarted := ipvs.New(f.k, f.l)
	res, err := restarted.Apply(want, false)
	if err != nil || res.Writes != 0 || res.Dumps != 1 {
		t.Errorf("restart: %+v, %v; want one dump and no writes", res.Stats, err)
	}
	if f.l.Writes != ledgerWrites {
		t.Errorf("ledger rewritten with nothing new to own")
	}
	// Adoption without a ledger (e.g. first run of lbd over a kernel
	// configured by hand), when the service asks for it: taken over,
	// weights fixed. Without adopt, see TestForeignVirtualServers.
	g := &fixture{k: f.k, l: &fakeipvs.Ledger{}}
	g.a = ipvs.New(g.k, g.l)
	adopt := svc(web, "wrr", rs1, 3, rs2, 2)
	adopt.Adopt = true
	res = g.apply(t, false, adopt)
	if res.Writes != 1 || !g.l.Keys[web] {
		t.Errorf("adoption: %+v, ledger %v; want 1 write and web owned", res.Stats, g.l.Keys)
	}
}

func TestDrainAndReturn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture()
		f.apply(t, false, svc(web, "wrr", rs1, 3, rs2, 1, rs3, 1))
		f.k.SetConns(web, rs2, 4, 1)
		f.k.SetConns(web, rs3, 0, 2)

		// rs2 and rs3 leave: weight 0, no delete yet.
		res := f.apply(t, false, svc(web, "wrr", rs1, 3))
		if res.Writes != 2 || res.Draining != 2 {
			t.Errorf("drain start: %+v; want 2 writes, 2 draining", res)
		}
		f.expect(t, `
192.0.2.10:80/tcp wrr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=3
  -> 10.0.0.2:80 w=0
  -> 10.0.0.3:80 w=0
`)
		// rs3 comes back while draining: its weight returns, no delete+add.
		res = f.apply(t, false, svc(web, "wrr", rs1, 3, rs3, 1))
		if res.Writes != 1 || res.Draining != 1 {
			t.Errorf("return: %+v; want 1 write, 1 draining", res)
		}
		// A full sync sees rs2 still has connections: it stays.
		time.Sleep(10 * time.Second)
		f.apply(t, true, svc(web, "wrr", rs1, 3, rs3, 1))
		if !strings.Contains(f.k.String(), "10.0.0.2:80 w=0") {
			t.Errorf("real server with connections deleted before its drain timeout:\n%s", f.k)
		}
		// Its connections end: the next full sync deletes it.
		f.k.SetConns(web, rs2, 0, 0)
		f.apply(t, true, svc(web, "wrr", rs1, 3, rs3, 1))
		f.expect(t, `
192.0.2.10:80/tcp wrr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=3
  -> 10.0.0.3:80 w=1
`)
		// The drain timeout deletes one whose connections never end.
		f.k.SetConns(web, rs3, 7, 0)
		f.apply(t, false, svc(web, "wrr", rs1, 3))
		time.Sleep(time.Minute)
		f.apply(t, false, svc(web, "wrr", rs1, 3))
		f.expect(t, `
192.0.2.10:80/tcp wrr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=3
`)
	})
}

func TestUDPRealServerDeletedAtOnce(t *testing.T) {
	f := newFixture()
	f.apply(t, false, svc(dns, "rr", rs1, 1, rs2, 1))
	res := f.apply(t, false, svc(dns, "rr", rs1, 1))
	if len(res.DeletedUDP) != 1 || res.DeletedUDP[0] != (ipvs.UDPDest{Service: dns, Real: rs2}) || res.Draining != 0 {
		t.Errorf("%+v; want rs2 deleted at once and reported for conntrack", res)
	}
	f.expect(t, "192.0.2.53:53/udp rr flags=0x0 timeout=0\n  -> 10.0.0.1:80 w=1\n")
}

// kernels runs a test with the plain kernel (one call per object) and with
// one that also creates new virtual servers in batches.
var kernels = []struct {
	name  string
	batch bool
}{{"one call per object", false}, {"batch", true}}

func fixtureFor(batch bool) *fixture {
	f := &fixture{k: &fakeipvs.Kernel{}, l: &fakeipvs.Ledger{}}
	var k ipvs.Kernel = f.k
	if batch {
		k = fakeipvs.BatchKernel{Kernel: f.k}
	}
	f.a = ipvs.New(k, f.l)
	return f
}

func TestOneBadServiceDoesNotBlockOthers(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantDumps int // in the sync after the failure
	}{
		// Nothing was created: the cache stays true, no dump.
		{"the kernel refuses it cleanly", syscall.EINVAL, 0},
		{"no scheduler module", syscall.ENOENT, 0},
		// Anything else leaves the kernel uncertain: the next sync dumps.
		{"an error that leaves the kernel uncertain", syscall.EIO, 1},
	}
	for _, kt := range kernels {
		for _, tt := range tests {
			t.Run(kt.name+"/"+tt.name, func(t *testing.T) {
				f := fixtureFor(kt.batch)
				f.k.Fail = map[lvs.Key]error{web: tt.err}
				res, err := f.a.Apply([]desired.Service{svc(web, "wrr", rs1, 1), svc(dns, "rr", rs2, 1)}, false)
				if !slices.Equal(res.Failed, []lvs.Key{web}) {
					t.Errorf("Failed = %v; want [%v]", res.Failed, web)
				}
				if !errors.Is(err, tt.err) || !strings.Contains(err.Error(), "adding virtual server 192.0.2.10:80/tcp (service svc at test)") ||
					strings.Count(err.Error(), "192.0.2.10") != 1 {
					t.Fatalf("err = %v; want the kernel's error, located, once", err)
				}
				f.expect(t, "192.0.2.53:53/udp rr flags=0x0 timeout=0\n  -> 10.0.0.2:80 w=1\n")
				// The next (requested) sync adds web.
				res = f.apply(t, false, svc(web, "wrr", rs1, 1), svc(dns, "rr", rs2, 1))
				if res.Dumps != tt.wantDumps || res.Writes != 2 || res.Failed != nil {
					t.Errorf("next sync: %+v; want %d dumps, 2 writes", res, tt.wantDumps)
				}
				f.expect(t, "192.0.2.10:80/tcp wrr flags=0x0 timeout=0\n  -> 10.0.0.1:80 w=1\n192.0.2.53:53/udp rr flags=0x0 timeout=0\n  -> 10.0.0.2:80 w=1\n")
			})
		}
	}
}

// TestRequestedSyncsFollowRandomChanges drives the applier through random
// tables, mostly with requested syncs (which skip unchanged virtual servers
// by comparing with the previous list), and requires the kernel to hold
// exactly each table after every step; an unchanged table writes nothing.
func TestRequestedSyncsFollowRandomChanges(t *testing.T) {
	keys := []lvs.Key{web, dns, other}
	addrs := []netip.AddrPort{rs1, rs2, rs3}
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 2))
		f := fixtureFor(seed%2 == 1)
		var prev []desired.Service
		for step := range 80 {
			var want []desired.Service
			for i, k := range keys {
				if r.IntN(4) == 0 {
					continue
				}
				var dests []any
				for _, a := range addrs {
					if r.IntN(3) > 0 {
						dests = append(dests, a, r.IntN(3))
					}
				}
				s := svc(k, []string{"wrr", "rr"}[r.IntN(2)], dests...)
				s.DrainTimeout = 0 // deleted at once: the kernel must equal want
				if i < len(prev) && prev[i].Key == k && r.IntN(2) == 0 {
					s = prev[i] // the same value again, as desired.Compute reuses it
				}
				want = append(want, s)
			}
			full := r.IntN(10) == 0
			if _, err := f.a.Apply(want, full); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			var exp strings.Builder
			for _, s := range want {
				fmt.Fprintf(&exp, "%s %s flags=%#x timeout=%d\n", s.Key, s.Scheduler, s.Flags, s.Timeout)
				for _, d := range s.Dests {
					fmt.Fprintf(&exp, "  -> %s w=%d\n", d.Addr, d.Weight)
				}
			}
			if got := f.k.String(); got != exp.String() {
				t.Fatalf("seed %d step %d (full %v): kernel\n%s\nwant\n%s", seed, step, full, got, exp.String())
			}
			if res, err := f.a.Apply(want, false); err != nil || res.Writes != 0 || res.Dumps != 0 {
				t.Fatalf("seed %d step %d: unchanged table: %+v, %v", seed, step, res, err)
			}
			prev = want
		}
	}
}
