package conf

import (
	"math"
	"strconv"
	"strings"
)

// def is a parameter: $NAME=value, a multi-line one, or one of keepalived's
// standard ones, whose value is computed at each use.
type def struct {
	value     string // a multi-line value has '\n' between its lines
	multiline bool
	fn        func(params string) string
	maxParams int
}

// mlText is the rest of a multi-line definition still to be read; ok
// false means none.
type mlText struct {
	s  string
	ok bool
}

// mlSaved is an outer multi-line expansion set aside for an inner one, with
// the sequence depth it hid.
type mlSaved struct {
	rest     mlText
	seqDepth int
}

// lineMax is the longest line keepalived handles: its buffer is MAXBUF
// (1024) bytes with the terminating NUL.
const lineMax = 1024

// standardDefs are keepalived 2.2.7's predefined parameters.
func (r *reader) standardDefs() map[string]*def {
	return map[string]*def{
		"_PWD":      {fn: func(string) string { return r.pwd() }},
		"_INSTANCE": {fn: func(string) string { return r.configID }},
		"_RANDOM":   {fn: r.random, maxParams: 2},
		"_HASH":     {value: "#"},
		"_BANG":     {value: "!"},
	}
}

// pwd is ${_PWD}: keepalived's working directory, the directory of the file
// being read, with symbolic links resolved.
func (r *reader) pwd() string {
	dir := r.curDir()
	if dir == "" {
		dir = "."
	}
	real, err := r.fs.Realpath(dir)
	if err != nil {
		return dir
	}
	return real
}

// random is ${_RANDOM [MIN [MAX]]} as keepalived 2.2.7 computes it, C's
// unsigned arithmetic, its output cut to as many digits as MAX has and all.
func (r *reader) random(params string) string {
	lo, hi := uint64(0), uint64(32767)
	if params != "" {
		var rest string
		lo, rest = strtoul10(params)
		if rest != "" {
			if hi, rest = strtoul10(rest); rest != "" {
				r.probs.warnf(r.pos, KindSubstitution, "${_RANDOM %s}: too many numbers; keepalived uses two", params)
			}
		}
	}
	digits := 0
	for v := int64(hi); ; v /= 10 {
		digits++
		if v/10 == 0 {
			break
		}
	}
	mod := hi - lo + 1
	if mod == 0 {
		r.probs.errorf(r.pos, KindSubstitution, "${_RANDOM %s}: keepalived 2.2.7 divides by zero here and crashes", params)
		return strconv.FormatUint(lo, 10)
	}
	val := strconv.FormatInt(int64(uint64(r.rand())%mod+lo), 10)
	if len(val) > digits {
		val = val[:digits]
	}
	r.probs.warnf(r.pos, KindSubstitution, "${_RANDOM} is a new number each time keepalived starts; lbd read %s", val)
	return val
}

// strtoul10 is strtoul(s, &end, 10) on text of digits and spaces.
func strtoul10(s string) (uint64, string) {
	s = strings.TrimLeft(s, " ")
	i := 0
	var v uint64
	over := false
	for ; i < len(s) && isDigit(s[i]); i++ {
		d := uint64(s[i] - '0')
		if over || v > (math.MaxUint64-d)/10 {
			v, over = math.MaxUint64, true // ULONG_MAX, and the digits go on
			continue
		}
		v = v*10 + d
	}
	return v, s[i:]
}

// checkDefinition reads $NAME=value (keepalived's check_definition()): a
// name of letters, digits and '_' not starting with a digit, no space
// before '='; a final backslash starts a multi-line definition. It returns
// nil when buf is no definition.
func (r *reader) checkDefinition(buf string) *def {
	if len(buf) < 2 || buf[0] != '$' || !isAlpha(buf[1]) && buf[1] != '_' {
		return nil
	}
	eq := strings.IndexByte(buf, '=')
	if eq < 0 || strings.IndexFunc(buf[2:eq], func(c rune) bool { return c > 0x7f || !isName(byte(c)) }) >= 0 {
		return nil
	}
	d := r.defs[buf[1:eq]]
	if d == nil {
		d = &def{}
		r.defs[buf[1:eq]] = d
	}
	d.fn = nil // a standard definition can be overridden
	v := strings.TrimLeft(buf[eq+1:], " \t")
	d.value, d.multiline = v, false
	if strings.HasSuffix(v, `\`) {
		d.multiline = true
		d.value = ""
		if len(v) >= 2 {
			d.value = strings.TrimRight(v[:len(v)-1], " \t") + "\n"
		}
	}
	return d
}

// setDefinition sets a ~SEQ or ~LST variable (keepalived's
// set_definition(): a multi-line definition of that name stays one).
func (r *reader) setDefinition(name, value string) {
	d := r.defs[name]
	if d == nil {
		d = &def{}
		r.defs[name] = d
	}
	d.value, d.fn = value, nil
}

// continueDefinition adds a line to the multi-line definition being read.
func (r *reader) continueDefinition(buf string) {
	d := r.mlDef
	more := strings.HasSuffix(buf, `\`)
	if more {
		buf = strings.TrimRight(buf[:len(buf)-1], " \t") + "\n"
	} else {
		r.endDefinition()
	}
	if len(buf) >= 2 || buf != "" && !more {
		d.value += buf
		r.bytesOut += int64(len(buf))
		r.checkBytesOut()
	}
}

// endDefinition ends the multi-line definition being read; one with no
// text before its last line is a one-line definition.
func (r *reader) endDefinition() {
	if r.mlDef.value == "" {
		r.mlDef.multiline = false
	}
	r.mlDef = nil
}

// use is a $NAME or ${NAME} in a line, starting at its '$'.
type use struct {
	d      *def
	params string // ${_RANDOM 1 10}: "1 10"
	span   int    // bytes that keepalived replaces
}

// findUse is keepalived's find_definition() for a use at buf[at] == '$':
// $NAME must be followed by white space, ',', ')' or the end of the line;
// ${NAME} need not. A multi-line definition is used only at the end of a
// line.
func (r *reader) findUse(buf string, at int) (use, bool) {
	i := at + 1
	braces := i < len(buf) && buf[i] == '{'
	if braces {
		i++
	}
	if i >= len(buf) || !isAlpha(buf[i]) && buf[i] != '_' {
		return use{}, false
	}
	j := i + 1
	for j < len(buf) && isName(buf[j]) {
		j++
	}
	name, ps, pe := buf[i:j], -1, -1
	if braces {
		for ; j < len(buf) && (buf[j] == ' ' || isDigit(buf[j])); j++ {
			if buf[j] != ' ' {
				if ps < 0 {
					ps = j
				}
				pe = j
			}
		}
		if ps >= 0 && pe+1 != j || j >= len(buf) || buf[j] != '}' {
			return use{}, false
		}
	} else if j < len(buf) && strings.IndexByte(" \t,)", buf[j]) < 0 {
		return use{}, false
	}
	end := i + len(name)
	atEnd := !braces && end == len(buf) || braces && end+1 == len(buf)
	d := r.defs[name]
	if d == nil || d.multiline && !atEnd || ps >= 0 && d.maxParams == 0 {
		return use{}, false
	}
	u := use{d: d, span: len(name) + 1}
	if ps >= 0 {
		u.params = buf[ps : pe+1]
		u.span = pe - at
	}
	if braces {
		u.span += 2
	}
	return u, true
}
