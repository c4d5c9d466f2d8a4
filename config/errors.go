package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
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

// suggest returns the accepted word closest to got, if it is close enough
// to be a likely typo.
func suggest(got string, accepted []string) string {
	best, bestD := "", len(got)/3+1
	for _, a := range accepted {
		if d := editDistance(strings.ToLower(got), strings.ToLower(a)); d < bestD {
			best, bestD = a, d
		}
	}
	return best
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
