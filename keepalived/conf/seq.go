package conf

import (
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// seq is an active ~SEQ or ~LST line: it sets its variables and hands out
// its text once per value.
type seq struct {
	text string
	// ~SEQ(name, start, step, last); hex is ~SEQx.
	name             string
	next, step, last int64
	hex              bool
	// ~LST(params, values...): one set of values per line.
	params []string
	values [][]string
	at     int
}

// addSequence starts the ~SEQ or ~LST of buf.
func (r *reader) addSequence(buf string) {
	var s *seq
	var why string
	if buf[1] == 'S' {
		s, why = r.parseSeq(buf)
	} else {
		s, why = parseLst(buf)
	}
	if s == nil {
		r.probs.errorf(r.pos, KindSequence, "invalid %s %q: %s; keepalived skips the line", buf[:4], buf, why)
		return
	}
	r.seqs = append(r.seqs, s)
}

// seqLine sets the newest sequence's variables to their next values and
// returns its text, as keepalived's read_line() does; the sequence ends
// after its last value.
func (r *reader) seqLine() string {
	s := r.seqs[len(r.seqs)-1]
	done := false
	if s.params == nil {
		val := strconv.FormatInt(s.next, 10)
		if s.hex {
			val = strconv.FormatUint(uint64(s.next), 16)
		}
		r.setDefinition(s.name, val)
		next := s.next + s.step // wraps where keepalived's long is undefined: the sequence ends there
		overflow := s.step > 0 && next < s.next || s.step < 0 && next > s.next
		s.next = next
		done = overflow || s.step > 0 && next > s.last || s.step < 0 && next < s.last
	} else {
		for i, p := range s.params {
			r.setDefinition(p, s.values[s.at][i])
		}
		s.at++
		done = s.at == len(s.values)
	}
	if done {
		r.seqs = r.seqs[:len(r.seqs)-1]
	}
	return s.text
}

// seqParamsMax is keepalived's buffer for ~SEQ's numbers: three longs with
// their separators.
const seqParamsMax = 3*20 + 3 + 1

// parseSeq reads ~SEQ(var, [start, [step,]] end) text, or ~SEQx(...), as
// keepalived's add_seq() does; on failure it says why.
func (r *reader) parseSeq(buf string) (*seq, string) {
	s := &seq{}
	p := 4
	if at(buf, p) == 'x' {
		s.hex = true
		p++
	}
	p = skipBlanks(buf, p)
	if at(buf, p) != '(' {
		return nil, "expected '('"
	}
	p = skipBlanks(buf, p+1)
	start := p
	p = skipUntil(buf, p, " \t,)")
	s.name = buf[start:p]
	p = skipBlanks(buf, p)
	if p >= len(buf) || buf[p] == ')' || s.name == "" {
		return nil, "expected a variable and its values"
	}
	p = skipBlanks(buf, p+1) // keepalived skips any one byte here, not only ','
	end := strings.IndexByte(buf[p:], ')')
	if end < 0 {
		return nil, "no ')'"
	}
	params := buf[p : p+end+1]
	if len(params)+1 > seqParamsMax {
		return nil, "its numbers are longer than keepalived's buffer"
	}
	params, _, _ = r.substitute(params, seqParamsMax, mlText{})
	var why string
	if s.next, s.step, s.last, why = seqNumbers(params); why != "" {
		return nil, why
	}
	if s.hex && (s.next < 0 || s.last < 0) {
		return nil, "~SEQx takes no negative numbers"
	}
	s.text = strings.TrimLeft(buf[p+end+1:], " \t")
	return s, ""
}

// seqNumbers reads "end)", "start, end)" or "start, step, end)", numbers in
// C's notation (0x1f, 017).
func seqNumbers(params string) (start, step, end int64, why string) {
	one, q := strtol(params, 0)
	q = skipBlanks(params, q)
	if at(params, q) == ')' {
		end, step, start = one, 1, 1
		if end < 1 {
			step = -1
		}
		if end < 0 {
			start = -1
		}
		return start, step, end, ""
	}
	if at(params, q) != ',' {
		return 0, 0, 0, "expected ',' or ')' after a number"
	}
	two, q := strtol(params, q+1)
	q = skipBlanks(params, q)
	if at(params, q) == ')' {
		step = 1
		if one > two {
			step = -1
		}
		return one, step, two, ""
	}
	if at(params, q) != ',' {
		return 0, 0, 0, "expected ',' or ')' after a number"
	}
	three, q := strtol(params, q+1)
	if at(params, skipBlanks(params, q)) != ')' {
		return 0, 0, 0, "expected ')' after the third number"
	}
	if two == 0 || one < three && two < 0 || one > three && two > 0 {
		return 0, 0, 0, "its step never reaches the end"
	}
	return one, two, three, ""
}

// parseLst reads ~LST(var, v1, v2...) text or ~LST({var1, var2},
// {v1, v2}, ...) text as keepalived's add_lst() does.
func parseLst(buf string) (*seq, string) {
	p := skipBlanks(buf, 4)
	if at(buf, p) != '(' {
		return nil, "expected '('"
	}
	s := &seq{}
	p = skipBlanks(buf, p+1)
	var ok bool
	if s.params, p, ok = lstList(buf, p, " \t,}", nil); !ok {
		return nil, "expected variables separated by ','"
	}
	if at(buf, p) != ',' {
		return nil, "expected ',' after the variables"
	}
	p = skipBlanks(buf, p+1)
	for {
		var set []string
		if set, p, ok = lstList(buf, p, " \t,})", s.params); !ok {
			return nil, "expected values separated by ',', no more than variables"
		}
		for len(set) < len(s.params) {
			set = append(set, "") // missing values are empty
		}
		s.values = append(s.values, set)
		if at(buf, p) == ')' {
			break
		}
		if at(buf, p) != ',' {
			return nil, "expected ',' or ')' after values"
		}
		p = skipBlanks(buf, p+1)
	}
	s.text = strings.TrimLeft(buf[p+1:], " \t")
	return s, ""
}

// lstList reads one item, or a {...} list of items, at buf[p:], and
// returns where it stops (after the '}' and blanks). Reading values, vars
// are the variables: no more values than them.
func lstList(buf string, p int, stops string, vars []string) ([]string, int, bool) {
	end := byte(',')
	if at(buf, p) == '{' {
		end = '}'
		p = skipBlanks(buf, p+1)
	}
	var items []string
	for {
		start := p
		p = skipUntil(buf, p, stops)
		items = append(items, buf[start:p])
		p = skipBlanks(buf, p)
		if at(buf, p) == end || vars != nil && end == ',' && at(buf, p) == ')' {
			break
		}
		if at(buf, p) != ',' || vars != nil && len(items) >= len(vars) {
			return nil, p, false
		}
		p = skipBlanks(buf, p+1)
	}
	if end == '}' {
		p = skipBlanks(buf, p+1)
	}
	return items, p, true
}

// at is s[i], or 0 past its end, as C strings read.
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// skipUntil returns the index of the first byte of s[i:] in stops, or len(s).
func skipUntil(s string, i int, stops string) int {
	if j := strings.IndexAny(s[i:], stops); j >= 0 {
		return i + j
	}
	return len(s)
}

func skipBlanks(s string, i int) int {
	for i < len(s) && isBlank(s[i]) {
		i++
	}
	return i
}

// strtol is C's strtol(s + i, &end, 0): white space, a sign, then 0x for
// hexadecimal, 0 for octal or decimal digits; the value saturates. No
// digits: 0, and the text goes on at i.
func strtol(s string, i int) (int64, int) {
	j := i
	for j < len(s) && isSpace(s[j]) {
		j++
	}
	neg := false
	if c := at(s, j); c == '+' || c == '-' {
		neg = c == '-'
		j++
	}
	base := uint64(10)
	if at(s, j) == '0' {
		base = 8
		if at(s, j+1)|0x20 == 'x' && isXDigit(at(s, j+2)) {
			base, j = 16, j+2
		}
	}
	start := j
	var v uint64
	over := false
	for ; j < len(s); j++ {
		d := digitValue(s[j])
		if d >= base {
			break
		}
		hi, lo := bits.Mul64(v, base)
		v, over = lo+d, over || hi != 0 || lo+d < lo
	}
	if j == start {
		return 0, i
	}
	switch {
	case neg && (over || v > 1<<63):
		return math.MinInt64, j
	case neg:
		return -int64(v), j
	case over || v > math.MaxInt64:
		return math.MaxInt64, j
	}
	return int64(v), j
}

func digitValue(c byte) uint64 {
	switch {
	case isDigit(c):
		return uint64(c - '0')
	case isAlpha(c):
		return uint64(c|0x20-'a') + 10
	}
	return 99
}
