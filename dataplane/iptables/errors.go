package iptables

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of what an error quotes: the tool's message and the input line
// it names. lbd's input holds hundreds of rules; an error that quoted it
// would put kilobytes in every log line and in `lbd status`.
const (
	maxMessage  = 300
	maxLineText = 200
)

// RestoreError is iptables-restore's refusal of lbd's input, told
// briefly: the tool's own message and the one input line it names.
type RestoreError struct {
	Tool    string // the binary, e.g. iptables-nft-restore
	Err     error  // how it ended: its exit status
	Message string // its message on one line, bounded
	Line    int    // the input line it names (1-based); 0 if none
	Text    string // that line of the input, bounded
}

func (e *RestoreError) Error() string {
	s := fmt.Sprintf("%s: %v: %s", e.Tool, e.Err, e.Message)
	if e.Line > 0 {
		s += fmt.Sprintf(" [input line %d: %s]", e.Line, e.Text)
	}
	return s
}

func (e *RestoreError) Unwrap() error { return e.Err }

// lineRef finds the line iptables-restore names: "Error occurred at line:
// 4" (a rule it cannot parse) or "line 3 failed" (one the kernel refused,
// or the COMMIT of a table it refused).
var lineRef = regexp.MustCompile(`\bline:? ([0-9]+)`)

// newRestoreError makes err, the end of a restore of input that printed
// stderr, a RestoreError.
func newRestoreError(tool, input, stderr string, err error) *RestoreError {
	e := &RestoreError{Tool: tool, Err: err, Message: message(stderr)}
	m := lineRef.FindStringSubmatch(stderr)
	if m == nil {
		return e
	}
	n, _ := strconv.Atoi(m[1])
	lines := strings.Split(input, "\n")
	if n >= 1 && n <= len(lines) {
		e.Line, e.Text = n, truncate(lines[n-1], maxLineText)
	}
	if e.Text == "COMMIT" {
		// iptables-legacy learns of the kernel's refusal only when it
		// commits the whole table; the kernel logs which rule it was.
		e.Text += " (the kernel refused one of the table's rules; its log, dmesg, names it)"
	}
	return e
}

// message puts a tool's stderr on one line, without blank lines and the
// "Try `iptables-restore -h'" advice, bounded.
func message(stderr string) string {
	var parts []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "Try `") {
			continue
		}
		parts = append(parts, l)
	}
	return truncate(strings.Join(parts, "; "), maxMessage)
}

// truncate cuts s to at most n bytes, on a rune boundary, and says so.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes more)", len(s)-cut)
}
