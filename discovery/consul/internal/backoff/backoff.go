// Package backoff computes retry delays for lbd's Consul clients:
// exponential, capped, with jitter so that many lbd instances that lost the
// same agent or servers do not retry in lockstep.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Backoff yields growing delays between Min and Max. The zero value is not
// usable; it is not safe for concurrent use.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration
}

// New returns a Backoff from min to max.
func New(min, max time.Duration) *Backoff { return &Backoff{Min: min, Max: max} }

// Next returns the delay before the next retry: a random duration in
// [d/2, d], where d starts at Min and doubles up to Max.
func (b *Backoff) Next() time.Duration {
	if b.next < b.Min {
		b.next = b.Min
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Reset starts the next series of retries at Min again.
func (b *Backoff) Reset() { b.next = 0 }
