package conntrack

// Deleter deletes the conntrack entries of UDP flows (a Cleaner).
type Deleter interface {
	DeleteUDP(flows []Flow) (uint, error)
}

// Queue removes the conntrack entries of deleted UDP real servers and
// keeps the flows it could not clean for the next pass: their destinations
// are already gone from IPVS, so a failed pass is retried from here, not
// from a diff. It is not safe for concurrent use: syncs are serial.
type Queue struct {
	d       Deleter
	pending []Flow
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
