package drift

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/dataplane/iptables"
	"github.com/lbdproject/lbd/internal/testnetns"
)

// reportWait bounds the wait for a report that should come: it only costs
// time when something is broken.
const reportWait = 20 * time.Second

// watchIn runs a watch in the namespace ns until the test ends and
// returns its reports, once every subscription is open.
func watchIn(t *testing.T, ns string, o Options) <-chan string {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	reports := make(chan string, 100)
	o.OnDrift = func(what string) { reports <- what }
	want := 1
	if len(o.Tables) > 0 {
		want = 2
	}
	ready := make(chan string, 10)
	tu := tuning{ns: h, settle: 50 * time.Millisecond, quiet: 10 * time.Millisecond, retryMin: 10 * time.Millisecond, retryMax: 100 * time.Millisecond,
		subscribed: func(what string) { ready <- what }}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { watch(ctx, o, tu); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for range want {
		select {
		case <-ready:
		case <-time.After(reportWait):
			t.Fatal("the watcher did not subscribe")
		}
	}
	return reports
}

// nextReport returns the next report, which must come.
func nextReport(t *testing.T, reports <-chan string, after string) string {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(reportWait):
		t.Fatalf("no drift reported after %s", after)
		return ""
	}
}

// TestWatchRulesOnTheKernel runs iptables-nft in a namespace: a restore
// lbd's runner starts is lbd's own, iptables run by hand is drift. Each
// step's report (or the next step's, for a step that must report
// nothing) is the next one: notifications arrive in order.
func TestWatchRulesOnTheKernel(t *testing.T) {
	testnetns.Require(t, "iptables-nft", "iptables-nft-restore")
	restore := "*filter\n:LBD-INPUT - [0:0]\n-A LBD-INPUT -j ACCEPT\n-I INPUT 1 -m comment --comment lbd -j LBD-INPUT\nCOMMIT\n"
	for _, tt := range []struct {
		name string
		own  bool
		// first is the first report: the foreign flush when lbd's restore
		// is known as its own, the restore itself when it is not.
		first string
	}{
		{"lbd's restore is its own", true, "nftables: ip filter LBD-INPUT: rule deleted by iptables-nft (pid "},
		{"without the record of children, lbd's restore is drift too", false, "nftables: ip filter LBD-INPUT: chain created (and 2 more changes of lbd's rules) by iptables-nft-re"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := testnetns.New(t)
			var children iptables.Children
			r, err := iptables.LookupRunner(4, iptables.NFT)
			if err != nil {
				t.Skip(err)
			}
			r = r.InNetns(ns).Recording(&children)
			o := Options{Link: "lbd0", Tables: lbdTables(4, 6)}
			if tt.own {
				o.Own = children.Started
			}
			reports := watchIn(t, ns, o)

			if err := r.Restore(restore); err != nil {
				t.Fatal(err)
			}
			testnetns.Run(t, ns, "iptables-nft", "-F", "LBD-INPUT")
			if got := nextReport(t, reports, "iptables -F LBD-INPUT"); !strings.HasPrefix(got, tt.first) {
				t.Fatalf("first report %q; want %q...", got, tt.first)
			}
			if !tt.own {
				return
			}
			for _, step := range []struct {
				cmd  []string
				want string
			}{
				{[]string{"iptables-nft", "-D", "INPUT", "-m", "comment", "--comment", "lbd", "-j", "LBD-INPUT"}, "nftables: ip filter INPUT: rule deleted by iptables-nft"},
				{[]string{"iptables-nft", "-A", "INPUT", "-j", "DROP"}, ""}, // after the jump: harmless
				{[]string{"iptables-nft", "-I", "INPUT", "-s", "192.0.2.1", "-j", "DROP"}, "nftables: ip filter INPUT: rule added by iptables-nft"},
				{[]string{"ip6tables-nft", "-t", "nat", "-N", "LBD-SERVICES"}, "nftables: ip6 nat LBD-SERVICES: chain created by ip6tables-nft"},
				{[]string{"nft", "delete", "table", "ip", "filter"}, "nftables: ip filter LBD-INPUT: chain deleted (and 2 more changes of lbd's rules) by nft"},
			} {
				testnetns.Run(t, ns, step.cmd...)
				if step.want == "" {
					continue
				}
				if got := nextReport(t, reports, strings.Join(step.cmd, " ")); !strings.HasPrefix(got, step.want) {
					t.Errorf("after %s: %q; want %q...", step.cmd, got, step.want)
				}
			}
			// lbd putting everything back is not drift: the marker after it
			// is the next report.
			if err := r.Restore(restore); err != nil {
				t.Fatal(err)
			}
			testnetns.Run(t, ns, "iptables-nft", "-A", "LBD-INPUT", "-j", "DROP")
			if got := nextReport(t, reports, "the marker"); !strings.HasPrefix(got, "nftables: ip filter LBD-INPUT: rule added by iptables-nft") {
				t.Errorf("after lbd's repair and a marker: %q", got)
			}
		})
	}
}

// TestWatchAddressesOnTheKernel moves addresses and a link (a bridge: the
// host may have no dummy links) in a namespace.
func TestWatchAddressesOnTheKernel(t *testing.T) {
	ns := testnetns.New(t)
	testnetns.Run(t, ns, "ip", "link", "add", "lbd0", "up", "type", "bridge")
	var mu sync.Mutex
	wanted := []netip.Addr{netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2")}
	expect := func(a netip.Addr, bound bool) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(wanted, a) == bound
	}
	reports := watchIn(t, ns, Options{Link: "lbd0", Expect: expect})
	steps := []struct {
		cmd  string
		want string // "": no report; the next step's is the next one
	}{
		{"ip addr add 198.18.100.1/32 dev lbd0", ""},
		{"ip addr del 198.18.100.1/32 dev lbd0", "addresses: VIP 198.18.100.1 removed from lbd0"},
		{"ip addr add 192.0.2.5/32 dev lbd0", "addresses: 192.0.2.5 added to lbd0, which lbd does not bind"},
		{"ip addr add 198.18.100.2/32 dev lbd0", ""},
		{"ip link set lbd0 down", "addresses: link lbd0 set down"},
		{"ip link del lbd0", "addresses: link lbd0 deleted"},
		// lbd's repair: the link again, up, with its VIP.
		{"ip link add lbd0 up type bridge && ip addr add 198.18.100.2/32 dev lbd0", ""},
		{"ip addr del 198.18.100.2/32 dev lbd0", "addresses: VIP 198.18.100.2 removed from lbd0"},
		{"ip link add eth1 type bridge && ip addr add 198.18.100.1/32 dev eth1", ""}, // another link's
		{"ip link set lbd0 name gone0", "addresses: link lbd0 deleted"},
	}
	for _, s := range steps {
		testnetns.Run(t, ns, "sh", "-c", s.cmd)
		if s.want == "" {
			continue
		}
		if got := nextReport(t, reports, s.cmd); got != s.want {
			t.Errorf("after %s: %q; want %q", s.cmd, got, s.want)
		}
	}
}

// TestFollowResubscribes: a subscription that cannot be opened is tried
// again, and the one that finally opens reports the gap as drift.
func TestFollowResubscribes(t *testing.T) {
	ns := testnetns.New(t)
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	subscribed := make(chan struct{}, 1)
	w := &watcher{t: tuning{retryMin: time.Millisecond, retryMax: 4 * time.Millisecond, subscribed: func(string) { subscribed <- struct{}{} }},
		rep: newReporter(), log: slog.New(slog.DiscardHandler)}
	attempts := 0
	open := func() (*socket, error) {
		if attempts++; attempts < 3 {
			return nil, errors.New("refused")
		}
		return subscribe(h, unix.NETLINK_ROUTE, rtnlgrpLink)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { w.follow(ctx, "address notifications", open, func(genl.Message) {}, nil); close(done) }()
	select {
	case <-subscribed:
	case <-time.After(reportWait):
		t.Fatal("never subscribed")
	}
	cancel()
	<-done // the open socket is closed when ctx ends
	if got, want := w.rep.take(), "address notifications resubscribed after a failure; what changed meanwhile is unknown"; got != want || attempts != 3 {
		t.Errorf("after %d attempts: %q; want %q", attempts, got, want)
	}
}
