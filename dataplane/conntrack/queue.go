package conntrack

import (
	"net/netip"
	"slices"
)

// Deleter deletes conntrack entries (a Cleaner).
type Deleter interface {
	// DeleteUDP deletes the entries of the UDP flows.
	DeleteUDP(flows []Flow) (uint, error)
	// DeleteReleased deletes the entries of connections to the VIPs that
	// were not source-NATed.
	DeleteReleased(vips []netip.Addr) (uint, error)
}

// Queue removes the conntrack entries of deleted UDP real servers and of
// VIPs the box stopped serving, and keeps what it could not clean for the
// next pass: the real servers are already gone from IPVS, the VIPs from
// the state, so a failed pass is retried from here, not from a diff. It
// is not safe for concurrent use: syncs are serial.
type Queue struct {
	d        Deleter
	pending  []Flow
	released []netip.Addr // sorted, unique
}

// NewQueue returns a Queue that deletes through d.
func NewQueue(d Deleter) *Queue { return &Queue{d: d} }

// Clean adds flows to the pending ones and deletes them all. It returns
// how many flows it cleaned and how many entries went; ran is false when
// there was nothing to do. On error every flow stays pending.
func (q *Queue) Clean(flows []Flow) (cleaned int, entries uint, ran bool, err error) {
	q.pending = append(q.pending, flows...)
	if len(q.pending) == 0 {
		return 0, 0, false, nil
	}
	n, err := q.d.DeleteUDP(q.pending)
	if err != nil {
		return 0, 0, true, err
	}
	cleaned = len(q.pending)
	q.pending = nil
	return cleaned, n, true, nil
}

// Pending returns how many flows wait for a retry.
func (q *Queue) Pending() int { return len(q.pending) }

// Release adds the VIPs the box stopped serving to those a failed pass
// left, drops any it serves again (their entries are live now), and
// deletes the entries of the rest. It returns how many VIPs it cleaned
// and how many entries went; ran is false when there was nothing to do.
// On error every VIP stays pending.
func (q *Queue) Release(vips []netip.Addr, serves func(netip.Addr) bool) (cleaned int, entries uint, ran bool, err error) {
	q.released = append(q.released, vips...)
	slices.SortFunc(q.released, netip.Addr.Compare)
	q.released = slices.DeleteFunc(slices.Compact(q.released), serves)
	if len(q.released) == 0 {
		return 0, 0, false, nil
	}
	n, err := q.d.DeleteReleased(q.released)
	if err != nil {
		return 0, 0, true, err
	}
	cleaned = len(q.released)
	q.released = nil
	return cleaned, n, true, nil
}

// PendingReleased returns how many VIPs wait for a retry.
func (q *Queue) PendingReleased() int { return len(q.released) }
