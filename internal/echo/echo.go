// Package echo cuts text from outside lbd (a file's value or key, a
// Consul name, a keepalived.conf word) when an error message repeats it,
// so that a 5 MB name gives a short log line.
package echo

import (
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"
)

// Max is the most bytes of one string from outside that a message repeats.
const Max = 80

// String is a string from outside lbd in a message. Formatted (%s, %q or
// %v) it is cut to Max bytes, at a character boundary, and followed by its
// whole length.
type String string

// Format implements fmt.Formatter.
func (e String) Format(f fmt.State, verb rune) {
	s, more := string(e), ""
	if len(s) > Max {
		cut := Max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, more = s[:cut], fmt.Sprintf("…(%d bytes)", len(s))
	}
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	io.WriteString(f, s)
	io.WriteString(f, more)
}

// Args wraps the long strings among args in String, in place: every
// string a message is given may come from outside.
func Args(args []any) []any {
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > Max {
			args[i] = String(s)
		}
	}
	return args
}
