package syncd

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// fakeKernel runs daemons as the kernel does: one per role, defaults
// resolved at start (a backup's MaxLen from an MTU of 1500), EEXIST and
// ESRCH as ErrRunning and ErrNotRunning.
type fakeKernel struct {
	running map[Role]Daemon
	calls   []string // "start master", "stop backup", in order
	// failures make the call of that name fail.
	failList  error
	failStart map[Role]error
	failStop  map[Role]error
}

func newFake(running ...Daemon) *fakeKernel {
	k := &fakeKernel{running: map[Role]Daemon{}}
	for _, d := range running {
		k.running[d.Role] = d
	}
	return k
}

func (k *fakeKernel) List() ([]Daemon, error) {
	if k.failList != nil {
		return nil, k.failList
	}
	var out []Daemon
	for _, r := range []Role{Master, Backup} {
		if d, ok := k.running[r]; ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func (k *fakeKernel) Start(d Daemon) error {
	k.calls = append(k.calls, "start "+d.Role.String())
	if err := k.failStart[d.Role]; err != nil {
		return err
	}
	if _, ok := k.running[d.Role]; ok {
		return ErrRunning
	}
	r := d.Resolved()
	if r.MaxLen == 0 {
		r.MaxLen = 1500 - udp4HeaderLen
	}
	k.running[d.Role] = r
	return nil
}

func (k *fakeKernel) Stop(r Role) error {
	k.calls = append(k.calls, "stop "+r.String())
	if err := k.failStop[r]; err != nil {
		return err
	}
	if _, ok := k.running[r]; !ok {
		return ErrNotRunning
	}
	delete(k.running, r)
	return nil
}

// resolvedMaster and resolvedBackup are how the kernel reports daemons
// started with only role, interface and sync id.
func resolvedMaster(ifname string, id uint8) Daemon {
	return Daemon{Role: Master, Interface: ifname, SyncID: id, MaxLen: 1472, Group: DefaultGroup(), Port: 8848, TTL: 1}
}

func resolvedBackup(ifname string, id uint8) Daemon {
	return Daemon{Role: Backup, Interface: ifname, SyncID: id, MaxLen: 1472, Group: DefaultGroup(), Port: 8848, TTL: 1}
}

// applyCase is one Apply: the kernel before, the want, and what Apply
// must do.
type applyCase struct {
	name    string
	running []Daemon
	want    []Daemon
	setup   func(*fakeKernel)
	calls   []string
	stats   Stats
	err     string // a substring of the error; "" for none
	after   []Role // roles running afterwards
}

// testDaemons are the wants of the Apply cases.
func testDaemons() (master, backup Daemon) {
	return Daemon{Role: Master, Interface: "backend", SyncID: 7}, Daemon{Role: Backup, Interface: "backend", SyncID: 7}
}

func TestApply(t *testing.T) {
	master, backup := testDaemons()
	runApply(t, []applyCase{
		{name: "nothing wanted, nothing running", after: nil},
		{name: "start both", want: []Daemon{backup, master},
			calls: []string{"start master", "start backup"},
			stats: Stats{Started: []Role{Master, Backup}}, after: []Role{Master, Backup}},
		{name: "defaults resolved: nothing to do",
			running: []Daemon{resolvedMaster("backend", 7), resolvedBackup("backend", 7)},
			want:    []Daemon{master, backup}, after: []Role{Master, Backup}},
		{name: "explicit defaults match the kernel's",
			running: []Daemon{resolvedMaster("backend", 7)},
			want:    []Daemon{{Role: Master, Interface: "backend", SyncID: 7, MaxLen: 1472, Group: netip.MustParseAddr("224.0.0.81"), Port: 8848, TTL: 1}},
			after:   []Role{Master}},
		{name: "backup default maxlen follows the MTU",
			running: []Daemon{{Role: Backup, Interface: "backend", SyncID: 7, MaxLen: 8972, Group: DefaultGroup(), Port: 8848, TTL: 1}},
			want:    []Daemon{backup}, after: []Role{Backup}},
		{name: "backup maxlen clamped by the kernel",
			running: []Daemon{{Role: Backup, Interface: "backend", SyncID: 7, MaxLen: 1024, Group: DefaultGroup(), Port: 8848, TTL: 1}},
			want:    []Daemon{{Role: Backup, Interface: "backend", SyncID: 7, MaxLen: 100}}, after: []Role{Backup}},
		{name: "other sync id: restart",
			running: []Daemon{resolvedMaster("backend", 8), resolvedBackup("backend", 7)},
			want:    []Daemon{master, backup},
			calls:   []string{"stop master", "start master"},
			stats:   Stats{Restarted: []Role{Master}}, after: []Role{Master, Backup}},
		{name: "other group, port, ttl, interface: restart",
			running: []Daemon{resolvedMaster("frontend", 7), resolvedBackup("backend", 7)},
			want: []Daemon{master, {Role: Backup, Interface: "backend", SyncID: 7,
				Group: netip.MustParseAddr("ff02::8:81"), Port: 9000, TTL: 2}},
			calls: []string{"stop master", "start master", "stop backup", "start backup"},
			stats: Stats{Restarted: []Role{Master, Backup}}, after: []Role{Master, Backup}},
		{name: "stop unwanted",
			running: []Daemon{resolvedMaster("backend", 7), resolvedBackup("backend", 7)},
			want:    []Daemon{backup},
			calls:   []string{"stop master"},
			stats:   Stats{Stopped: []Role{Master}}, after: []Role{Backup}},
		{name: "apply nil stops all",
			running: []Daemon{resolvedMaster("backend", 7), resolvedBackup("backend", 7)},
			calls:   []string{"stop master", "stop backup"},
			stats:   Stats{Stopped: []Role{Master, Backup}}},
	})
}

func TestApplyFailures(t *testing.T) {
	master, backup := testDaemons()
	boom := errors.New("boom")
	runApply(t, []applyCase{
		{name: "stopped behind our back meanwhile",
			running: []Daemon{resolvedMaster("backend", 7)},
			setup:   func(k *fakeKernel) { k.failStop = map[Role]error{Master: fmt.Errorf("netlink: %w", ErrNotRunning)} },
			calls:   []string{"stop master"},
			stats:   Stats{Stopped: []Role{Master}}, after: []Role{Master}},
		{name: "list fails: nothing done",
			running: []Daemon{resolvedMaster("backend", 7)},
			want:    []Daemon{backup},
			setup:   func(k *fakeKernel) { k.failList = boom },
			err:     "listing the IPVS sync daemons: boom", after: []Role{Master}},
		{name: "one role fails, the other is applied",
			want:  []Daemon{master, backup},
			setup: func(k *fakeKernel) { k.failStart = map[Role]error{Master: boom} },
			calls: []string{"start master", "start backup"},
			stats: Stats{Started: []Role{Backup}},
			err:   "starting the IPVS master sync daemon on backend: boom", after: []Role{Backup}},
		{name: "restart whose stop fails starts nothing",
			running: []Daemon{resolvedMaster("backend", 8)},
			want:    []Daemon{master},
			setup:   func(k *fakeKernel) { k.failStop = map[Role]error{Master: boom} },
			calls:   []string{"stop master"},
			err:     "restarting with other settings: stopping the IPVS master sync daemon on backend: boom", after: []Role{Master}},
		{name: "restart whose start fails says the daemon is stopped",
			running: []Daemon{resolvedMaster("backend", 8)},
			want:    []Daemon{master},
			setup:   func(k *fakeKernel) { k.failStart = map[Role]error{Master: boom} },
			calls:   []string{"stop master", "start master"},
			err:     "(it is stopped now): starting the IPVS master sync daemon on backend: boom"},
	})
}

func runApply(t *testing.T, cases []applyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := newFake(tc.running...)
			if tc.setup != nil {
				tc.setup(k)
			}
			st, err := New(k).Apply(tc.want)
			checkErr(t, err, tc.err)
			if !slices.Equal(k.calls, tc.calls) {
				t.Errorf("calls %q, want %q", k.calls, tc.calls)
			}
			if fmt.Sprint(st) != fmt.Sprint(tc.stats) {
				t.Errorf("stats %+v, want %+v", st, tc.stats)
			}
			if st.Changed() != (fmt.Sprint(tc.stats) != fmt.Sprint(Stats{})) {
				t.Errorf("Changed() = %v for %+v", st.Changed(), st)
			}
			var after []Role
			for _, r := range []Role{Master, Backup} {
				if _, ok := k.running[r]; ok {
					after = append(after, r)
				}
			}
			if !slices.Equal(after, tc.after) {
				t.Errorf("running afterwards %v, want %v", after, tc.after)
			}
		})
	}
}

// TestApplyConverges: once applied, the same want changes nothing, with
// every kind of setting.
func TestApplyConverges(t *testing.T) {
	for _, want := range [][]Daemon{
		{{Role: Master, Interface: "backend", SyncID: 1}},
		{{Role: Master, Interface: "frontend", SyncID: 255, MaxLen: 9000, Group: netip.MustParseAddr("239.18.0.1"), Port: 9999, TTL: 3},
			{Role: Backup, Interface: "backend", SyncID: 0, MaxLen: 1, Group: netip.MustParseAddr("ff02::8:81")}},
		{{Role: Backup, Interface: "eth0", Group: netip.MustParseAddr("::ffff:224.0.0.81")}},
	} {
		k := newFake()
		a := New(k)
		if _, err := a.Apply(want); err != nil {
			t.Fatal(err)
		}
		st, err := a.Apply(want)
		if err != nil || st.Changed() {
			t.Errorf("second Apply of %v: %+v, %v; kernel runs %v", want, st, err, k.running)
		}
	}
}

func TestApplyRefusesInvalid(t *testing.T) {
	for _, tc := range []struct {
		want []Daemon
		err  string
	}{
		{[]Daemon{{Interface: "backend"}}, "neither master (1) nor backup (2)"},
		{[]Daemon{{Role: 3, Interface: "backend"}}, "sync daemon role 3"},
		{[]Daemon{{Role: Master}}, "master sync daemon: no interface"},
		{[]Daemon{{Role: Backup, Interface: "a-very-long-name"}}, "is not an interface name"},
		{[]Daemon{{Role: Backup, Interface: "eth/0"}}, "is not an interface name"},
		{[]Daemon{{Role: Master, Interface: "backend", Group: netip.MustParseAddr("198.18.0.1")}}, "group 198.18.0.1 is not a multicast address"},
		{[]Daemon{{Role: Master, Interface: "backend", Group: netip.MustParseAddr("2001:2::1")}}, "is not a multicast address"},
		{[]Daemon{{Role: Master, Interface: "backend"}, {Role: Master, Interface: "frontend"}}, "two master sync daemons wanted"},
	} {
		// Running daemons that the want would stop: an invalid want
		// must leave them alone.
		k := newFake(resolvedMaster("backend", 7), resolvedBackup("backend", 7))
		_, err := New(k).Apply(tc.want)
		checkErr(t, err, tc.err)
		if len(k.calls) != 0 || len(k.running) != 2 {
			t.Errorf("%v: calls %q, running %v", tc.want, k.calls, k.running)
		}
	}
}

func TestResolved(t *testing.T) {
	for _, tc := range []struct {
		in, want Daemon
	}{
		{Daemon{Role: Master}, Daemon{Role: Master, MaxLen: 1472, Group: DefaultGroup(), Port: 8848, TTL: 1}},
		// A backup's default depends on the interface's MTU.
		{Daemon{Role: Backup}, Daemon{Role: Backup, Group: DefaultGroup(), Port: 8848, TTL: 1}},
		{Daemon{Role: Master, Group: netip.MustParseAddr("ff02::8:81")},
			Daemon{Role: Master, MaxLen: 1452, Group: netip.MustParseAddr("ff02::8:81"), Port: 8848, TTL: 1}},
		{Daemon{Role: Master, MaxLen: 1}, Daemon{Role: Master, MaxLen: 1, Group: DefaultGroup(), Port: 8848, TTL: 1}},
		{Daemon{Role: Backup, MaxLen: 1023}, Daemon{Role: Backup, MaxLen: 1024, Group: DefaultGroup(), Port: 8848, TTL: 1}},
		{Daemon{Role: Master, MaxLen: 65535}, Daemon{Role: Master, MaxLen: 65507, Group: DefaultGroup(), Port: 8848, TTL: 1}},
		{Daemon{Role: Backup, MaxLen: 65535, Group: netip.MustParseAddr("ff02::8:81%backend")},
			Daemon{Role: Backup, MaxLen: 65487, Group: netip.MustParseAddr("ff02::8:81"), Port: 8848, TTL: 1}},
		{Daemon{Role: Master, Group: netip.MustParseAddr("::ffff:239.1.2.3"), Port: 1, TTL: 255},
			Daemon{Role: Master, MaxLen: 1472, Group: netip.MustParseAddr("239.1.2.3"), Port: 1, TTL: 255}},
	} {
		if got := tc.in.Resolved(); got != tc.want {
			t.Errorf("%+v.Resolved() = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

func TestDaemonString(t *testing.T) {
	for _, tc := range []struct {
		d    Daemon
		want string
	}{
		{Daemon{Role: Master, Interface: "backend", SyncID: 7},
			"master sync daemon on backend (syncid 7, group 224.0.0.81:8848, ttl 1, maxlen 1472)"},
		{Daemon{Role: Backup, Interface: "backend", Group: netip.MustParseAddr("ff02::8:81"), Port: 9000},
			"backup sync daemon on backend (syncid 0, group [ff02::8:81]:9000, ttl 1, maxlen default)"},
		{Daemon{Role: 5}, "role(5) sync daemon on  (syncid 0, group 224.0.0.81:8848, ttl 1, maxlen default)"},
	} {
		if got := tc.d.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Errorf("no error, want one with %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("error %q, want one with %q", err, want)
	}
}
