package ipvs

import (
	"errors"
	"testing"
	"time"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// timeoutKernel holds timeouts and can fail its next call.
type timeoutKernel struct {
	cur   desired.Timeouts
	calls int
	fail  bool
}

func (k *timeoutKernel) EnsureTimeouts(t desired.Timeouts) (bool, error) {
	k.calls++
	if k.fail {
		k.fail = false
		return false, errors.New("reading IPVS timeouts: no")
	}
	wrote := t != k.cur
	k.cur = t
	return wrote, nil
}

func TestTimeoutApplier(t *testing.T) {
	a, b := desired.Timeouts{TCP: 900 * time.Second}, desired.Timeouts{TCP: 300 * time.Second}
	k := &timeoutKernel{}
	ta := NewTimeouts(k)
	steps := []struct {
		name       string
		want       desired.Timeouts
		full, fail bool
		wantCalls  int // kernel calls so far
		wantStats  Stats
		wantErr    bool
	}{
		{"first: read and written", a, false, false, 1, Stats{Dumps: 1, Writes: 1}, false},
		{"requested, same: nothing", a, false, false, 1, Stats{}, false},
		{"full: read, nothing to write", a, true, false, 2, Stats{Dumps: 1}, false},
		{"changed: written", b, false, false, 3, Stats{Dumps: 1, Writes: 1}, false},
		{"failed", a, false, true, 4, Stats{Dumps: 1}, true},
		{"after a failure: tried again", a, false, false, 5, Stats{Dumps: 1, Writes: 1}, false},
	}
	for _, s := range steps {
		k.fail = s.fail
		st, err := ta.Apply(s.want, s.full)
		if st != s.wantStats || (err != nil) != s.wantErr || k.calls != s.wantCalls {
			t.Errorf("%s: stats %+v, err %v, kernel calls %d; want %+v, err %v, %d", s.name, st, err, k.calls, s.wantStats, s.wantErr, s.wantCalls)
		}
	}
}
