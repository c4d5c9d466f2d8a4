package conntrack

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

type fakeDeleter struct {
	fail  []bool // per call
	calls [][]Flow
}

func (f *fakeDeleter) DeleteUDP(flows []Flow) (uint, error) {
	f.calls = append(f.calls, slices.Clone(flows))
	if i := len(f.calls) - 1; i < len(f.fail) && f.fail[i] {
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
