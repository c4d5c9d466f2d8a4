package conntrack

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

type fakeDeleter struct {
	fail  []bool // per call, of either kind
	calls [][]Flow
	vips  [][]netip.Addr
}

func (f *fakeDeleter) failing() bool {
	i := len(f.calls) + len(f.vips) - 1
	return i < len(f.fail) && f.fail[i]
}

func (f *fakeDeleter) DeleteReleased(vips []netip.Addr) (uint, error) {
	f.vips = append(f.vips, slices.Clone(vips))
	if f.failing() {
		return 0, errors.New("conntrack said no")
	}
	return uint(3 * len(vips)), nil
}

func (f *fakeDeleter) DeleteUDP(flows []Flow) (uint, error) {
	f.calls = append(f.calls, slices.Clone(flows))
	if f.failing() {
		return 0, errors.New("conntrack said no")
	}
	return uint(2 * len(flows)), nil
}

func TestQueue(t *testing.T) {
	flow := func(vip, real string) Flow {
		return Flow{VIP: netip.MustParseAddrPort(vip), Real: netip.MustParseAddrPort(real)}
	}
	a, b := flow("198.18.0.53:53", "198.18.1.1:53"), flow("198.18.0.53:53", "198.18.1.2:53")
	type step struct {
		add         []Flow
		wantCall    []Flow // nil: no call
		wantCleaned int
		wantErr     bool
		wantPending int
	}
	tests := []struct {
		name  string
		fail  []bool
		steps []step
	}{
		{"nothing to do", nil, []step{{nil, nil, 0, false, 0}}},
		{"cleaned at once", nil, []step{{[]Flow{a}, []Flow{a}, 1, false, 0}, {nil, nil, 0, false, 0}}},
		{"a failed pass is retried with what came since", []bool{true}, []step{
			{[]Flow{a}, []Flow{a}, 0, true, 1},
			{[]Flow{b}, []Flow{a, b}, 2, false, 0},
			{nil, nil, 0, false, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDeleter{fail: tt.fail}
			q := NewQueue(d)
			for i, s := range tt.steps {
				calls := len(d.calls)
				cleaned, entries, ran, err := q.Clean(s.add)
				if ran != (s.wantCall != nil) || (ran && !slices.Equal(d.calls[calls], s.wantCall)) {
					t.Errorf("step %d: ran %v, calls %v; want call %v", i, ran, d.calls[calls:], s.wantCall)
				}
				if cleaned != s.wantCleaned || (err != nil) != s.wantErr || q.Pending() != s.wantPending {
					t.Errorf("step %d: cleaned %d (entries %d), err %v, pending %d; want %d, err %v, pending %d",
						i, cleaned, entries, err, q.Pending(), s.wantCleaned, s.wantErr, s.wantPending)
				}
			}
		})
	}
}

func TestQueueRelease(t *testing.T) {
	a, b, c := netip.MustParseAddr("198.18.100.1"), netip.MustParseAddr("198.18.100.2"), netip.MustParseAddr("2001:2::1")
	type step struct {
		released    []netip.Addr
		served      []netip.Addr // served now
		wantCall    []netip.Addr // nil: no call
		wantCleaned int
		wantErr     bool
		wantPending int
	}
	tests := []struct {
		name  string
		fail  []bool
		steps []step
	}{
		{"nothing released", nil, []step{{nil, []netip.Addr{a}, nil, 0, false, 0}}},
		{"released at once, sorted and unique", nil, []step{
			{[]netip.Addr{c, b, a, b}, nil, []netip.Addr{a, b, c}, 3, false, 0},
			{nil, nil, nil, 0, false, 0},
		}},
		{"a failed pass is retried with what came since", []bool{true}, []step{
			{[]netip.Addr{a}, nil, []netip.Addr{a}, 0, true, 1},
			{[]netip.Addr{b}, nil, []netip.Addr{a, b}, 2, false, 0},
		}},
		{"a VIP served again before the retry is left alone", []bool{true}, []step{
			{[]netip.Addr{a, b}, nil, []netip.Addr{a, b}, 0, true, 2},
			{nil, []netip.Addr{a}, []netip.Addr{b}, 1, false, 0},
		}},
		{"every pending VIP served again: no pass", []bool{true}, []step{
			{[]netip.Addr{a}, nil, []netip.Addr{a}, 0, true, 1},
			{nil, []netip.Addr{a}, nil, 0, false, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDeleter{fail: tt.fail}
			q := NewQueue(d)
			for i, s := range tt.steps {
				calls := len(d.vips)
				serves := func(v netip.Addr) bool { return slices.Contains(s.served, v) }
				cleaned, entries, ran, err := q.Release(s.released, serves)
				if ran != (s.wantCall != nil) || (ran && !slices.Equal(d.vips[calls], s.wantCall)) {
					t.Errorf("step %d: ran %v, calls %v; want call %v", i, ran, d.vips[calls:], s.wantCall)
				}
				if cleaned != s.wantCleaned || (err != nil) != s.wantErr || q.PendingReleased() != s.wantPending {
					t.Errorf("step %d: cleaned %d (entries %d), err %v, pending %d; want %d, err %v, pending %d",
						i, cleaned, entries, err, q.PendingReleased(), s.wantCleaned, s.wantErr, s.wantPending)
				}
			}
		})
	}
}
