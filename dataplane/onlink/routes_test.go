package onlink

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeRoutes is a routing table the test changes; each Subscribe hands
// out a channel the test signals on or closes (a lost subscription).
type fakeRoutes struct {
	mu     sync.Mutex
	routes []netip.Prefix
	err    error
	subs   chan chan struct{} // each subscription's channel, as it is made
}

func (f *fakeRoutes) Connected() ([]netip.Prefix, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.routes), f.err
}

func (f *fakeRoutes) Subscribe(done <-chan struct{}) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	f.subs <- ch
	return ch, nil
}

func (f *fakeRoutes) set(err error, ps ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes, f.err = nil, err
	for _, p := range ps {
		f.routes = append(f.routes, netip.MustParsePrefix(p))
	}
}

func TestFollow(t *testing.T) {
	f := &fakeRoutes{subs: make(chan chan struct{}, 1)}
	f.set(nil, "198.18.1.0/24")
	reports := make(chan []netip.Prefix, 10)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Follow(ctx, slog.New(slog.DiscardHandler), f, func(ps []netip.Prefix) { reports <- ps })
	}()
	sub := <-f.subs
	type step struct {
		name   string
		routes []string
		err    error
		lose   bool     // close the subscription instead of signalling
		want   []string // nil: no report expected
	}
	steps := []step{
		{name: "the first read is reported", want: []string{"198.18.1.0/24"}},
		{name: "a connected route added", routes: []string{"198.18.1.0/24", "2001:2::/64"}, want: []string{"198.18.1.0/24", "2001:2::/64"}},
		{name: "a change that leaves the connected routes alike", routes: []string{"198.18.1.0/24", "2001:2::/64"}},
		{name: "a failed read reports nothing", err: errors.New("ENOBUFS")},
		{name: "the next read does", routes: []string{"2001:2::/64"}, want: []string{"2001:2::/64"}},
		{name: "a lost subscription is renewed and the routes read again", routes: []string{}, lose: true, want: []string{}},
	}
	for i, s := range steps {
		if i > 0 {
			f.set(s.err, s.routes...)
			if s.lose {
				close(sub)
				sub = <-f.subs
			} else {
				sub <- struct{}{}
			}
		}
		// A change with no report is seen by the report of the next step,
		// which fails if the earlier one reported too.
		if s.want == nil {
			continue
		}
		var got []netip.Prefix
		select {
		case got = <-reports:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no report", s.name)
		}
		var want []netip.Prefix
		for _, p := range s.want {
			want = append(want, netip.MustParsePrefix(p))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: reported %v, want %v", s.name, got, want)
		}
	}
	cancel()
	<-done
	if len(reports) != 0 {
		t.Errorf("reports left over: %v", <-reports)
	}
}
