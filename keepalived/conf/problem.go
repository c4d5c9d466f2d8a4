package conf

import (
	"fmt"
	"strconv"
	"strings"

	inecho "github.com/lbdproject/lbd/internal/echo"
)

// Pos is a line of a configuration file. Line 0 names the file itself (it
// could not be read at all).
type Pos struct {
	File string
	Line int
}

func (p Pos) String() string {
	if p.Line == 0 {
		return p.File
	}
	return p.File + ":" + strconv.Itoa(p.Line)
}

// Severity says whether keepalived itself would object to a problem.
type Severity int

const (
	// Warning: keepalived 2.2.7 logs this at most and runs the
	// configuration; or lbd notes something an importer should know.
	Warning Severity = iota
	// Error: `keepalived -t` reports a configuration error here, or lbd
	// refuses input that keepalived would misread, hang on or crash on.
	Error
)

func (s Severity) String() string {
	if s == Error {
		return "error"
	}
	return "warning"
}

// Kind classifies a problem, so that callers count and decide on values
// rather than on message text.
type Kind int

const (
	KindQuote          Kind = iota + 1 // a quote that is not closed
	KindBrace                          // a '{' or '}' out of place, a block not closed
	KindSequence                       // an invalid ~SEQ or ~LST line
	KindSubstitution                   // a $NAME substitution keepalived mangles or draws at random
	KindInclude                        // an include that reads nothing, or not every file
	KindIncludeLoop                    // a file that includes itself, directly or not
	KindIncludeUnclear                 // an include keepalived's processes would read differently
	KindCopyMarker                     // a line keepalived's child processes take for a file marker
	KindEscapedComment                 // a \# or \! that keepalived's child processes read as a comment
	KindLongLine                       // a line longer than keepalived's 1023-byte buffer
	KindNUL                            // a NUL byte, which ends keepalived's line early
	KindLimit                          // input beyond lbd's bounds on size, lines, depth or work
	KindTooMany                        // problems beyond the number listed
)

func (k Kind) String() string {
	switch k {
	case KindQuote:
		return "quote"
	case KindBrace:
		return "brace"
	case KindSequence:
		return "sequence"
	case KindSubstitution:
		return "substitution"
	case KindInclude:
		return "include"
	case KindIncludeLoop:
		return "include-loop"
	case KindIncludeUnclear:
		return "include-unclear"
	case KindCopyMarker:
		return "copy-marker"
	case KindEscapedComment:
		return "escaped-comment"
	case KindLongLine:
		return "long-line"
	case KindNUL:
		return "nul"
	case KindLimit:
		return "limit"
	case KindTooMany:
		return "too-many"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Problem is one thing found while reading: where, what kind, how serious
// and, in words, why.
type Problem struct {
	Pos      Pos
	Kind     Kind
	Severity Severity
	Msg      string
}

// Error makes a Problem an error value ("file:line: msg").
func (p *Problem) Error() string { return p.Pos.String() + ": " + p.Msg }

// ErrorList is every error of one Parse, in reading order.
type ErrorList []*Problem

func (l ErrorList) Error() string {
	if len(l) == 1 {
		return l[0].Error()
	}
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return fmt.Sprintf("%d errors:\n%s", len(l), strings.Join(msgs, "\n"))
}

// Unwrap lets errors.As find each Problem.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// msgOpenQuote is said once per line, though keepalived finds an open
// quote up to three times (de-commenting twice, then splitting words).
const msgOpenQuote = "a double quote is not closed; keepalived reports it and drops the line from the quote on"

// maxProblems is how many errors, and how many warnings, one Parse lists:
// hostile input could otherwise make millions.
const maxProblems = 100

// problems collects the errors and warnings of one Parse, each once.
type problems struct {
	errs, warns ErrorList
	more        [2]int // beyond maxProblems, by severity
	firstMore   [2]Pos // where the first unlisted one was
	seen        map[problemKey]bool
}

type problemKey struct {
	pos  Pos
	kind Kind
	msg  string
}

func (s *problems) add(pos Pos, kind Kind, sev Severity, format string, args ...any) {
	msg := fmt.Sprintf(format, echoArgs(args)...)
	key := problemKey{pos, kind, msg}
	if s.seen[key] {
		return // keepalived de-comments a line twice and reports twice
	}
	if s.seen == nil {
		s.seen = map[problemKey]bool{}
	}
	list := &s.warns
	if sev == Error {
		list = &s.errs
	}
	if len(*list) >= maxProblems {
		if s.more[sev] == 0 {
			s.firstMore[sev] = pos
		}
		s.more[sev]++
		return
	}
	s.seen[key] = true
	*list = append(*list, &Problem{Pos: pos, Kind: kind, Severity: sev, Msg: msg})
}

func (s *problems) errorf(pos Pos, kind Kind, format string, args ...any) {
	s.add(pos, kind, Error, format, args...)
}

func (s *problems) warnf(pos Pos, kind Kind, format string, args ...any) {
	s.add(pos, kind, Warning, format, args...)
}

// finish returns the warnings and the errors, each list closed by a count
// of what it left out.
func (s *problems) finish() ([]Problem, error) {
	for sev, list := range []*ErrorList{&s.warns, &s.errs} {
		if n := s.more[sev]; n > 0 {
			*list = append(*list, &Problem{Pos: s.firstMore[sev], Kind: KindTooMany, Severity: Severity(sev),
				Msg: fmt.Sprintf("%d more %ss not listed, the first here (lbd lists %d)", n, Severity(sev), maxProblems)})
		}
	}
	warns := make([]Problem, len(s.warns))
	for i, w := range s.warns {
		warns[i] = *w
	}
	if len(s.errs) == 0 {
		return warns, nil
	}
	return warns, s.errs
}

// echo is input text in a message, cut as internal/echo cuts it.
type echo = inecho.String

// echoArgs cuts every long string among args: all of them may be input.
func echoArgs(args []any) []any { return inecho.Args(args) }
