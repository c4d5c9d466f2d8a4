package healthcheck

// What a check takes from outside: real servers, and the commands exec
// runs, are not trusted, so every read has a cap and whatever they said
// goes into results and logs cut short and escaped.

import (
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

const (
	// outsideMax bounds how much of what a real server or a command said
	// goes into a result or a log line: enough to recognise it, too
	// little to flood status pages and logs.
	outsideMax = 200
	// resultMax bounds a check's result message as status pages and logs
	// show it, whatever made it (checkers' messages are far shorter).
	resultMax = 1024
)

// capError is a read that reached its cap: the check fails saying what
// was too long, rather than reading on.
type capError struct {
	what  string // "response headers"
	verb  string // "exceed", agreeing with what
	limit int    // bytes
}

func (e *capError) Error() string {
	return fmt.Sprintf("%s %s %s", e.what, e.verb, capSize(e.limit))
}

// capSize is n bytes as a cap is written: "16 KiB", or "200 bytes".
func capSize(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " bytes"
}

// outsideText renders s, which came from outside, for a message: valid
// UTF-8 with control and other unprintable characters escaped (\n, \x1b,
// \u200b), so that it cannot break a log line or a terminal, and at most
// outsideMax bytes of it, cut on a character and marked with the length
// of the whole: "…(70000 bytes)".
func outsideText(s string) string { return outsideCut(s, false) }

// outsideCut is outsideText for s that may have been cut already, before
// it came here (cut true): then it is marked as at least as long as it is,
// "…(4096+ bytes)", however short.
func outsideCut(s string, cut bool) string {
	mark := func(out []byte) string {
		if cut {
			return string(out) + fmt.Sprintf("…(%d+ bytes)", len(s))
		}
		return string(out) + fmt.Sprintf("…(%d bytes)", len(s))
	}
	if !cut && outsidePlain(s) {
		return s
	}
	out := make([]byte, 0, min(len(s), outsideMax)+len("…(4294967296 bytes)"))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size == 1:
			piece = fmt.Sprintf(`\x%02x`, s[i])
		case unicode.IsPrint(r):
			piece = s[i : i+size]
		default:
			q := strconv.QuoteRune(r) // '\n', '\u200b'
			piece = q[1 : len(q)-1]
		}
		if len(out)+len(piece) > outsideMax {
			return mark(out)
		}
		out = append(out, piece...)
		i += size
	}
	if cut {
		return mark(out)
	}
	return string(out)
}

// outsidePlain reports whether s can be shown as it is: short, printable
// ASCII. It is the common case, and costs no allocation.
func outsidePlain(s string) bool {
	if len(s) > outsideMax {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// outsideErr is an error whose message quotes outside data: it reads as
// op and that message made safe by outsideText, and unwraps to the error
// itself.
type outsideErr struct {
	op  string
	msg string
	err error
}

func (e *outsideErr) Error() string { return e.op + ": " + e.msg }

func (e *outsideErr) Unwrap() error { return e.err }

// outsideWrap is fmt.Errorf("%s: %w", op, err) for an error whose message
// may quote what a real server sent (a malformed status line, the names
// of a certificate), cut and escaped by outsideText.
func outsideWrap(op string, err error) error {
	msg := err.Error()
	if outsidePlain(msg) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &outsideErr{op: op, msg: outsideText(msg), err: err}
}

// resultText is a check's result as recorded: err's message, cut to
// resultMax bytes on a character boundary, with the whole length marked.
func resultText(err error) string {
	s := err.Error()
	if len(s) <= resultMax {
		return s
	}
	n := resultMax
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
}
