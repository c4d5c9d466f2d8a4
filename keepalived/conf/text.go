package conf

import "strings"

// whiteSpace is keepalived's WHITE_SPACE_STR, which separates words.
const whiteSpace = " \t\f\n\r\v"

// The C character classes keepalived uses, in the C locale it runs in (it
// never calls setlocale): bytes above 0x7f are in none of them.
func isSpace(c byte) bool  { return c == ' ' || c >= '\t' && c <= '\r' }
func isBlank(c byte) bool  { return c == ' ' || c == '\t' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool  { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isAlnum(c byte) bool  { return isAlpha(c) || isDigit(c) }
func isXDigit(c byte) bool { return isDigit(c) || c|0x20 >= 'a' && c|0x20 <= 'f' }
func isName(c byte) bool   { return isAlnum(c) || c == '_' }

// decomment is keepalived's decomment(): it removes leading blanks, a
// comment ('#' or '!' outside double quotes, to the end of the line), the
// backslash of \# and \! outside quotes, and trailing blanks, keeping a
// final backslash (a continued definition) right after the last word.
// open reports a double quote left open.
func decomment(line string) (out string, open bool) {
	b := []byte(strings.TrimLeft(line, " \t"))
	quote := false
	skip, contAt := -1, -1
	for p := 0; p < len(b); {
		switch c := b[p]; {
		case c == '"':
			if skip < 0 {
				quote = !quote
			}
			p++
		case c == '\\' && p+1 == len(b):
			contAt = p
			p = len(b)
		case c == '\\':
			if !quote && (b[p+1] == '#' || b[p+1] == '!') {
				b = append(b[:p], b[p+1:]...)
				p++
			} else {
				p += 2
			}
		case (c == '#' || c == '!') && !quote && skip < 0:
			skip = p
			p++
		default:
			p++
		}
	}
	end := len(b)
	if contAt >= 0 {
		end = contAt
	}
	if skip >= 0 {
		end = skip
	}
	out = strings.TrimRight(string(b[:end]), " \t")
	if contAt >= 0 {
		out += `\`
	}
	return out, quote
}

// isInclude is keepalived's is_include(): "include" and its variants
// (includer, includem, includew, includeb, includea), then white space.
func isInclude(line string) bool {
	if !strings.HasPrefix(line, "include") || len(line) == 7 {
		return false
	}
	if isSpace(line[7]) {
		return true
	}
	return len(line) > 8 && isSpace(line[8]) && strings.IndexByte("rmwba", line[7]) >= 0
}

// splitBrace cuts a line before its first '{' or '}' outside double quotes,
// or after it when the line starts with one, as keepalived's read_line()
// does: braces reach the keyword parser as lines of their own. rest is the
// text still to be read ("" for none).
func splitBrace(line string) (first, rest string) {
	p := 0
	if line[0] != '{' && line[0] != '}' {
		p = -1
		for i := 0; ; {
			j := strings.IndexAny(line[i:], `{}"`)
			if j < 0 {
				break
			}
			i += j
			if line[i] != '"' {
				p = i
				break
			}
			k := strings.IndexByte(line[i+1:], '"')
			if k < 0 {
				break
			}
			i += k + 2
		}
	}
	if p >= 0 {
		skip := 0
		if p == 0 {
			skip = 1 + len(line[1:]) - len(strings.TrimLeft(line[1:], " \t"))
		}
		if p+skip < len(line) {
			rest = strings.TrimRight(line[p+skip:], " \t")
			line = line[:p+skip]
		}
	}
	return strings.TrimRight(line, " \t"), rest
}

// splitWords is keepalived's alloc_strvec(): words separated by white
// space; a double quote starts a word that runs to the next double quote,
// without the quotes. open reports a quote not closed (the words before it
// are kept, the rest of the line is lost, as in keepalived).
func splitWords(line string) (words []string, open bool) {
	for i := 0; ; {
		i += len(line[i:]) - len(strings.TrimLeft(line[i:], whiteSpace))
		if i >= len(line) {
			return words, false
		}
		if line[i] == '"' {
			j := strings.IndexByte(line[i+1:], '"')
			if j < 0 {
				return words, true
			}
			words = append(words, line[i+1:i+1+j])
			i += j + 2
			continue
		}
		j := strings.IndexAny(line[i:], whiteSpace+`"`)
		if j < 0 {
			j = len(line) - i
		}
		words = append(words, line[i:i+j])
		i += j
	}
}

// SplitError is an error of SplitQuoted.
type SplitError string

func (e SplitError) Error() string { return string(e) }

// The errors of SplitQuoted.
const (
	ErrOpenQuote      SplitError = "missing terminating quote"
	ErrTrailingEscape SplitError = "missing escaped character after a final backslash"
)

// SplitQuoted splits a line as keepalived's alloc_strvec_quoted_escaped()
// does for script command lines (notify scripts, misc_path, a vrrp_script's
// script, the HTTP regex): words are separated by white space; "..." and
// '...' quote (and are removed), and backslash escapes work as in the shell
// and C (\n, \t, \x41, \101, \cA, \" ...). keepalived applies it to a
// node's Raw line, and again to the script's word to get its argv.
func SplitQuoted(line string) ([]string, error) {
	var words []string
	for i := 0; ; {
		i += len(line[i:]) - len(strings.TrimLeft(line[i:], whiteSpace))
		if i >= len(line) {
			return words, nil
		}
		w, next, err := quotedWord(line, i)
		if err != nil {
			return nil, err
		}
		words = append(words, w)
		i = next
	}
}

// quotedWord reads the word at line[i:] for SplitQuoted.
func quotedWord(line string, i int) (string, int, error) {
	var w []byte
	quote := byte(0)
	for i < len(line) {
		stops := whiteSpace + `'"\`
		if quote != 0 {
			stops = string(quote) + `\`
		}
		j := strings.IndexAny(line[i:], stops)
		if j < 0 {
			if quote != 0 {
				return "", 0, ErrOpenQuote
			}
			return string(append(w, line[i:]...)), len(line), nil
		}
		w = append(w, line[i:i+j]...)
		i += j
		switch c := line[i]; {
		case c == '\\':
			if i+1 == len(line) {
				return "", 0, ErrTrailingEscape
			}
			var e byte
			e, i = unescape(line, i+1)
			w = append(w, e)
		case quote != 0: // the closing quote
			quote = 0
			i++
		case c == '"' || c == '\'':
			quote = c
			i++
		default: // white space ends the word
			return string(w), i, nil
		}
	}
	return string(w), i, nil
}

// unescape reads the escape after a backslash at line[i:] and returns the
// byte it stands for (C char arithmetic: it wraps at 8 bits) and where the
// text goes on.
func unescape(line string, i int) (byte, int) {
	at := func(k int) byte {
		if k < len(line) {
			return line[k]
		}
		return 0
	}
	switch c := line[i]; {
	case c == 'x' && isXDigit(at(i+1)):
		var v byte
		for i++; isXDigit(at(i)); i++ {
			v = v<<4 | hexVal(line[i])
		}
		return v, i
	case c == 'c' && at(i+1) != 0:
		return line[i+1] & 0x1f, i + 2
	case c >= '0' && c <= '7':
		v := c - '0'
		i++
		for n := 0; n < 2 && at(i) >= '0' && at(i) <= '7'; n++ {
			v = v<<3 + line[i] - '0'
			i++
		}
		return v, i
	}
	if e := strings.IndexByte("abEfnrtv", line[i]); e >= 0 {
		return "\a\b\x1b\f\n\r\t\v"[e], i + 1
	}
	return line[i], i + 1
}

func hexVal(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c | 0x20 - 'a' + 10
}
