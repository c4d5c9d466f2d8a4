// Package errcap bounds how many errors one bulk write reports: a failure
// that hits every VIP or set entry (10,000, say) would otherwise make a
// log line and a status of megabytes.
package errcap

import (
	"errors"
	"fmt"
)

// Max is how many errors a List keeps.
const Max = 5

// List keeps the first Max errors and counts the others, which its error
// names as "and N more <What> that failed".
type List struct {
	What string // "addresses", "entries"
	errs []error
	more int
}

// Add records err.
func (l *List) Add(err error) {
	if len(l.errs) == Max {
		l.more++
		return
	}
	l.errs = append(l.errs, err)
}

// Err joins what was kept; nil when nothing was added.
func (l *List) Err() error {
	if l.more > 0 {
		return errors.Join(append(l.errs, fmt.Errorf("and %d more %s that failed", l.more, l.What))...)
	}
	return errors.Join(l.errs...)
}
