package ipvs

import "github.com/lbdproject/lbd/dataplane/desired"

// TimeoutSetter sets IPVS's global connection timeouts where they differ
// from the kernel's, and reports whether it wrote (NetlinkKernel).
type TimeoutSetter interface {
	EnsureTimeouts(desired.Timeouts) (wrote bool, err error)
}

// TimeoutApplier keeps IPVS's global connection timeouts: it reads and
// writes them on a full sync, when they change, and after a failure; a
// requested sync with the same timeouts costs nothing.
type TimeoutApplier struct {
	k TimeoutSetter
	// applied is what the timeouts were last set to; nil before that and
	// after setting them failed.
	applied *desired.Timeouts
}

// NewTimeouts returns a TimeoutApplier over k.
func NewTimeouts(k TimeoutSetter) *TimeoutApplier { return &TimeoutApplier{k: k} }

// Apply makes the kernel's timeouts t.
func (a *TimeoutApplier) Apply(t desired.Timeouts, full bool) (Stats, error) {
	if !full && a.applied != nil && *a.applied == t {
		return Stats{}, nil
	}
	wrote, err := a.k.EnsureTimeouts(t)
	st := Stats{Dumps: 1}
	if wrote {
		st.Writes = 1
	}
	a.applied = nil
	if err != nil {
		return st, err
	}
	a.applied = &t
	return st, nil
}
