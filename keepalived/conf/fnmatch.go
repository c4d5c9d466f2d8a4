package conf

import "strings"

// fnmatch is glibc's fnmatch(pattern, name, FNM_PERIOD) in the C locale,
// as glob(3) matches one file name: '*' any bytes, '?' one byte, [...] one
// of a set ([!...] or [^...] none of it; ranges, [:class:]), '\' quotes
// the next byte; a leading '.' of the name only matches a '.' written in
// the pattern.
func fnmatch(pattern, name string) bool {
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pattern, ".") && !strings.HasPrefix(pattern, `\.`) {
		return false
	}
	p, n := 0, 0
	starP, starN := -1, -1
	for n < len(name) {
		if adv, ok := matchOne(pattern, p, name[n]); ok {
			p, n = p+adv, n+1
			continue
		}
		if p < len(pattern) && pattern[p] == '*' {
			starP, starN = p, n
			p++
			continue
		}
		if starP < 0 {
			return false
		}
		// Let the last '*' take one more byte and try again from there.
		starN++
		p, n = starP+1, starN
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// matchOne tries the pattern element at pattern[p] (not '*') on c and
// returns its length when it matches.
func matchOne(pattern string, p int, c byte) (int, bool) {
	if p >= len(pattern) {
		return 0, false
	}
	switch pattern[p] {
	case '*':
		return 0, false
	case '?':
		return 1, true
	case '\\':
		// A final backslash matches nothing (glibc: "trailing \ loses").
		return 2, p+1 < len(pattern) && pattern[p+1] == c
	case '[':
		if end, in, ok := bracket(pattern, p, c); ok {
			return end - p, in
		}
	}
	return 1, pattern[p] == c // an unclosed '[' is itself
}

// bracket matches c against the bracket expression at pattern[p] == '['
// and returns the index after its ']'; ok false when it is not closed.
func bracket(pattern string, p int, c byte) (end int, in, ok bool) {
	i := p + 1
	neg := i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^')
	if neg {
		i++
	}
	valid := true
	for first := true; ; first = false {
		if i >= len(pattern) {
			return 0, false, false
		}
		if pattern[i] == ']' && !first {
			i++
			break
		}
		lo, next, isClass, match := bracketItem(pattern, i, c)
		i = next
		switch {
		case isClass && match < 0:
			valid = false // an unknown class: glibc's fnmatch fails
		case isClass:
			in = in || match == 1
		case i+1 < len(pattern) && pattern[i] == '-' && pattern[i+1] != ']':
			hi, after, _, _ := bracketItem(pattern, i+1, c)
			i = after
			in = in || lo <= c && c <= hi
		default:
			in = in || lo == c
		}
	}
	return i, valid && in != neg, true
}

// bracketItem reads one member of a bracket expression at pattern[i]: a
// byte (after '\', or of [.x.] and [=x=]) or a [:class:], which it
// matches against c (match 1 or 0, -1 for a class glibc does not know).
func bracketItem(pattern string, i int, c byte) (b byte, next int, isClass bool, match int) {
	if pattern[i] == '[' && i+1 < len(pattern) && strings.IndexByte(":.=", pattern[i+1]) >= 0 {
		kind := pattern[i+1]
		if k := strings.Index(pattern[i+2:], string(kind)+"]"); k >= 0 {
			word := pattern[i+2 : i+2+k]
			next = i + 2 + k + 2
			if kind == ':' {
				return 0, next, true, classMatch(word, c)
			}
			if len(word) == 1 {
				return word[0], next, false, 0
			}
		}
	}
	if pattern[i] == '\\' && i+1 < len(pattern) {
		return pattern[i+1], i + 2, false, 0
	}
	return pattern[i], i + 1, false, 0
}

// classMatch says whether c is in the C locale's character class name.
func classMatch(name string, c byte) int {
	var in bool
	switch name {
	case "alpha":
		in = isAlpha(c)
	case "digit":
		in = isDigit(c)
	case "alnum":
		in = isAlnum(c)
	case "upper":
		in = c >= 'A' && c <= 'Z'
	case "lower":
		in = c >= 'a' && c <= 'z'
	case "space":
		in = isSpace(c)
	case "blank":
		in = isBlank(c)
	case "punct":
		in = c > ' ' && c < 0x7f && !isAlnum(c)
	case "print":
		in = c >= ' ' && c < 0x7f
	case "graph":
		in = c > ' ' && c < 0x7f
	case "cntrl":
		in = c < ' ' || c == 0x7f
	case "xdigit":
		in = isXDigit(c)
	default:
		return -1
	}
	if in {
		return 1
	}
	return 0
}
