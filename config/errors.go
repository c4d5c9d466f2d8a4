package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	inecho "github.com/lbdproject/lbd/internal/echo"
)

// Error is one problem in the configuration: where, which key, what is
// wrong and what is accepted.
type Error struct {
	Pos Pos
	Key string // dotted path such as service[2].port; empty for syntax errors
	Msg string
}

func (e *Error) Error() string {
	if e.Key == "" {
		return fmt.Sprintf("%s: %s", e.Pos, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.Pos, e.Key, e.Msg)
}

// ErrorList holds every problem found in one load, in file and line order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	if len(l) == 1 {
		return msgs[0]
	}
	return fmt.Sprintf("%d problems:\n%s", len(l), strings.Join(msgs, "\n"))
}

func (l ErrorList) sort() {
	slices.SortStableFunc(l, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.Pos.File, b.Pos.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
		)
	})
}

// newError makes an Error; strings among args are outside data and are
// echoed cut (see echo), and so is key.
func newError(pos Pos, key, format string, args ...any) *Error {
	return &Error{Pos: pos, Key: clip(key), Msg: fmt.Sprintf(format, echoArgs(args)...)}
}

// errorSink collects the problems of one load, up to maxErrors: each takes
// memory, and a million of them help nobody.
type errorSink struct {
	list ErrorList
	more int // problems beyond maxErrors
}

// full reports whether further problems are only counted.
func (s *errorSink) full() bool { return len(s.list) >= maxErrors }

func (s *errorSink) add(e *Error) {
	if s.full() {
		s.more++
		return
	}
	s.list = append(s.list, e)
}

// count is the number of problems found so far.
func (s *errorSink) count() int { return len(s.list) + s.more }

// result returns the problems in file and line order, and a last one that
// says how many were not listed; nil when there are none.
func (s *errorSink) result(mainFile string) ErrorList {
	if len(s.list) == 0 {
		return nil
	}
	s.list.sort()
	if s.more > 0 {
		s.list = append(s.list, &Error{Pos: Pos{File: mainFile}, Msg: fmt.Sprintf(
			"%d more problems not listed: lbd lists the first %d; expected a configuration with fewer problems (fix these and check again)", s.more, maxErrors)})
	}
	return s.list
}

// maxEcho and echo cut text from outside lbd in messages (internal/echo).
const maxEcho = inecho.Max

type echo = inecho.String

// whole is a string of lbd's own in an error message (a list of accepted
// keys, a path of its configuration), which is never cut.
type whole string

// echoArgs wraps the long strings among args: every string an error
// message is given may come from outside.
func echoArgs(args []any) []any { return inecho.Args(args) }

// clip is a key path or name cut as echo cuts it.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return fmt.Sprint(echo(s))
}

// suggest returns the accepted word closest to got, if it is close enough
// to be a likely typo.
func suggest(got string, accepted []string) string {
	best, bestD := "", len(got)/3+1
	lower := ""
	for _, a := range accepted {
		// The distance is at least the difference in length: a long got
		// (outside data) is compared with nothing.
		if abs(len(got)-len(a)) >= bestD {
			continue
		}
		if lower == "" {
			lower = strings.ToLower(got)
		}
		if d := editDistance(lower, strings.ToLower(a)); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
