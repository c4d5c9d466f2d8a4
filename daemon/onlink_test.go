package daemon

import (
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/onlink"
	"github.com/lbdproject/lbd/internal/syncbuf"
)

// The check reports a direct-routing real server off every link once when
// it appears, and once when it is resolved, whatever the number of syncs
// and route changes in between.
func TestOnLinkLogsOncePerAppearance(t *testing.T) {
	web := func(addr string, line int) onlink.Dest {
		return onlink.Dest{Service: "web", Addr: netip.MustParseAddrPort(addr), Source: config.Pos{File: "web.toml", Line: line}}
	}
	a, b := web("198.18.1.5:80", 7), web("198.18.2.5:80", 9)
	pfx := func(ss ...string) []netip.Prefix {
		out := []netip.Prefix{}
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	type step struct {
		name      string
		dests     []onlink.Dest  // set when routes is nil
		routes    []netip.Prefix // set when not nil
		want      []onlink.Dest  // the problems after the step
		warned    int            // "on no link" lines logged so far
		resolved  int            // "resolved" lines logged so far
		offLinkTo int            // the metric's last value
	}
	steps := []step{
		{name: "destinations before the routes are read: nothing known", dests: []onlink.Dest{a, b}, want: nil},
		{name: "routes read: b is off every link", routes: pfx("198.18.1.0/24"), want: []onlink.Dest{b}, warned: 1, offLinkTo: 1},
		{name: "the next sync says nothing new", dests: []onlink.Dest{a, b}, want: []onlink.Dest{b}, warned: 1, offLinkTo: 1},
		{name: "an unrelated route change neither", routes: pfx("198.18.1.0/24", "2001:2::/64"), want: []onlink.Dest{b}, warned: 1, offLinkTo: 1},
		{name: "b's link arrives", routes: pfx("198.18.1.0/24", "198.18.2.0/24"), want: nil, warned: 1, resolved: 1, offLinkTo: 0},
		{name: "b's link goes: a new appearance", routes: pfx("198.18.1.0/24"), want: []onlink.Dest{b}, warned: 2, resolved: 1, offLinkTo: 1},
		{name: "b leaves the configuration", dests: []onlink.Dest{a}, want: nil, warned: 2, resolved: 2, offLinkTo: 0},
	}
	var logs syncbuf.Buffer
	offLink := -1
	o := &onLink{log: slog.New(slog.NewTextHandler(&logs, nil)), offLink: func(n int) { offLink = n }}
	for _, s := range steps {
		if s.routes != nil {
			o.setConnected(s.routes)
		} else {
			o.setDests(s.dests)
		}
		var got []onlink.Dest
		for _, p := range o.Problems() {
			got = append(got, p.Dest)
		}
		if !slices.Equal(got, s.want) {
			t.Errorf("%s: problems %+v, want %+v", s.name, got, s.want)
		}
		out := logs.String()
		if n := strings.Count(out, "is on no link of this director"); n != s.warned {
			t.Errorf("%s: %d warnings logged, want %d:\n%s", s.name, n, s.warned, out)
		}
		if n := strings.Count(out, "problem resolved"); n != s.resolved {
			t.Errorf("%s: %d resolutions logged, want %d:\n%s", s.name, n, s.resolved, out)
		}
		if s.warned > 0 && offLink != s.offLinkTo {
			t.Errorf("%s: off-link metric %d, want %d", s.name, offLink, s.offLinkTo)
		}
	}
	out := logs.String()
	for _, want := range []string{"source=web.toml:9", `real_server=198.18.2.5:80`, `now="on a link"`, `now="no longer a direct-routing real server"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
	var none *onLink // before the daemon started it
	if none.Problems() != nil {
		t.Errorf("a nil check has problems")
	}
}
