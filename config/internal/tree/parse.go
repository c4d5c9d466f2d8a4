package tree

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits beyond which Parse leaves the document to BurntSushi/toml. None
// is reached by a configuration that decodes without errors.
const (
	maxDepth     = 32 // nesting of arrays and inline tables
	maxTableKeys = 64 // keys of one table: lookups are linear
)

// Parse parses src. It returns false, and nothing but the position where
// it stopped, when the document uses anything outside the plain TOML it
// handles, or is not valid TOML.
//
// What it handles: comments; bare keys, one per key/value line (no dotted
// keys); [table] and [[array of tables]] headers of bare keys that define
// each table once; one-line basic strings without escapes and one-line
// literal strings; decimal integers and floats without exponents or
// underscores; booleans; arrays and inline tables (with newlines and
// comments, as TOML 1.1 and BurntSushi/toml allow). Text must be valid UTF-8
// without control characters other than tab and newline (CR only before
// LF) and without a byte-order mark.
func Parse(src string) (root *Table, stop Pos, ok bool) {
	if bad := plainText(src); bad >= 0 {
		return nil, posOf(src, bad), false
	}
	p := &parser{src: src, line: 1, keys: make(map[string]string)}
	p.root = &Table{kind: kindHeader}
	p.cur = p.root
	if !p.document() {
		return nil, p.pos(), false
	}
	return p.root, Pos{}, true
}

// posOf returns the position of byte i of src.
func posOf(src string, i int) Pos {
	line := 1 + strings.Count(src[:i], "\n")
	return Pos{int32(line), int32(i - (strings.LastIndexByte(src[:i], '\n') + 1) + 1)}
}

// plainText returns the index of the first character of src that
// BurntSushi/toml's lexer refuses, or of a byte-order mark (which it skips
// and keypos counts), or of the first byte when src is not valid UTF-8;
// -1 when there is none.
func plainText(src string) int {
	ascii := true
	for i := 0; i < len(src); i++ {
		switch c := src[i]; {
		case c >= 0x80:
			ascii = false
		case c == '\r':
			if i+1 >= len(src) || src[i+1] != '\n' {
				return i
			}
		case c < 0x20 && c != '\t' && c != '\n', c == 0x7f:
			return i
		}
	}
	if ascii {
		return -1
	}
	if strings.HasPrefix(src, "\uFEFF") {
		return 0
	}
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRuneInString(src[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

type parser struct {
	src       string
	i         int
	line      int32
	lineStart int

	root *Table
	cur  *Table // the table of the last header
	// block holds the key/values of the current header's table and of the
	// inline tables being read, which get exactly sized slices when done.
	block []Entry
	// elems and elemPos hold the elements of the arrays being read.
	elems   []any
	elemPos []Pos
	depth   int
	// keys interns keys: the tree keeps no piece of src, which can be
	// collected as soon as Parse returns.
	keys map[string]string
}

func (p *parser) eof() bool { return p.i >= len(p.src) }

func (p *parser) peek() byte {
	if p.i >= len(p.src) {
		return 0
	}
	return p.src[p.i]
}

func (p *parser) pos() Pos { return Pos{p.line, int32(p.i - p.lineStart + 1)} }

func (p *parser) newline() {
	p.i++
	p.line++
	p.lineStart = p.i
}

// spaces skips spaces and tabs.
func (p *parser) spaces() {
	for p.i < len(p.src) && (p.src[p.i] == ' ' || p.src[p.i] == '\t') {
		p.i++
	}
}

// comment skips a comment, up to the end of its line.
func (p *parser) comment() {
	if p.peek() != '#' {
		return
	}
	for p.i < len(p.src) && p.src[p.i] != '\n' && p.src[p.i] != '\r' {
		p.i++
	}
}

// blank skips spaces, tabs, newlines and comments.
func (p *parser) blank() {
	for {
		p.spaces()
		switch p.peek() {
		case '#':
			p.comment()
		case '\r':
			p.i++ // plainText checked that LF follows
		case '\n':
			p.newline()
		default:
			return
		}
	}
}

// endOfLine reads the rest of a line after a header or a key/value: spaces,
// maybe a comment, then a newline or the end.
func (p *parser) endOfLine() bool {
	p.spaces()
	p.comment()
	switch p.peek() {
	case '\r':
		p.i++
		p.newline()
		return true
	case '\n':
		p.newline()
		return true
	}
	return p.eof()
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// key reads a bare key.
func (p *parser) key() (string, bool) {
	start := p.i
	for p.i < len(p.src) && isBare(p.src[p.i]) {
		p.i++
	}
	if p.i == start {
		return "", false
	}
	k, ok := p.keys[p.src[start:p.i]]
	if !ok {
		k = strings.Clone(p.src[start:p.i])
		p.keys[k] = k
	}
	return k, true
}

func (p *parser) document() bool {
	for {
		p.blank()
		if p.eof() {
			return p.flush()
		}
		if p.peek() == '[' {
			if !p.flush() || !p.header() {
				return false
			}
			continue
		}
		if !p.keyValue(0) || !p.endOfLine() {
			return false
		}
	}
}

// flush gives the current table the key/values read since its header.
func (p *parser) flush() bool {
	if len(p.block) > 0 {
		if len(p.cur.entries)+len(p.block) > maxTableKeys {
			return false
		}
		p.cur.entries = append(p.cur.entries, p.block...)
		clear(p.block)
		p.block = p.block[:0]
	}
	return true
}

// keyValue reads key = value into the block that starts at blockStart.
func (p *parser) keyValue(blockStart int) bool {
	at := p.pos()
	k, ok := p.key()
	if !ok {
		return false
	}
	p.spaces()
	if p.peek() != '=' {
		return false // a dotted key, or not a key/value at all
	}
	p.i++
	p.spaces()
	if len(p.block)-blockStart >= maxTableKeys {
		return false
	}
	for _, e := range p.block[blockStart:] {
		if e.Key == k {
			return false
		}
	}
	v, ok := p.value()
	if !ok {
		return false
	}
	p.block = append(p.block, Entry{Key: k, Val: v, Pos: at})
	return true
}

// header reads a [table] or [[array of tables]] header and makes its table
// the current one.
func (p *parser) header() bool {
	at := p.pos()
	p.i++
	array := p.peek() == '['
	if array {
		p.i++
	}
	t := p.root
	for {
		p.spaces()
		k, ok := p.key()
		if !ok {
			return false
		}
		p.spaces()
		switch p.peek() {
		case '.':
			p.i++
			if t, ok = p.step(t, k, at); !ok {
				return false
			}
			continue
		case ']':
			p.i++
		default:
			return false
		}
		if array {
			if p.peek() != ']' {
				return false
			}
			p.i++
		}
		if p.cur, ok = p.define(t, k, array, at); !ok {
			return false
		}
		return p.endOfLine()
	}
}

// step goes from t into its sub-table k, as a header's prefix does: into a
// table, made implicitly if need be, or the last table of an array of
// tables.
func (p *parser) step(t *Table, k string, at Pos) (*Table, bool) {
	e := t.entry(k)
	if e == nil {
		sub := &Table{kind: kindImplicit}
		return sub, add(t, Entry{Key: k, Val: sub, Pos: at})
	}
	switch v := e.Val.(type) {
	case *Table:
		return v, v.kind != kindValue
	case *Array:
		if v.Headers {
			return v.Elems[len(v.Elems)-1].(*Table), true
		}
	}
	return nil, false
}

// define makes the table of a header: a new table, or a new element of an
// array of tables. A header for a table that exists already, even one
// made implicitly by an earlier header, is left to BurntSushi/toml.
func (p *parser) define(t *Table, k string, array bool, at Pos) (*Table, bool) {
	e := t.entry(k)
	if !array {
		if e != nil {
			return nil, false
		}
		sub := &Table{kind: kindHeader}
		return sub, add(t, Entry{Key: k, Val: sub, Pos: at})
	}
	var a *Array
	if e == nil {
		a = &Array{Headers: true}
		if !add(t, Entry{Key: k, Val: a, Pos: at}) {
			return nil, false
		}
	} else if a, _ = e.Val.(*Array); a == nil || !a.Headers {
		return nil, false
	}
	sub := &Table{kind: kindElement}
	a.Elems = append(a.Elems, sub)
	a.Pos = append(a.Pos, at)
	return sub, true
}

// add adds a sub-table made by a header to t.
func add(t *Table, e Entry) bool {
	if len(t.entries) >= maxTableKeys {
		return false
	}
	t.entries = append(t.entries, e)
	return true
}

// value reads a value; what follows it is checked by the caller.
func (p *parser) value() (any, bool) {
	switch c := p.peek(); {
	case c == '"' || c == '\'':
		return p.str(c)
	case c == '[':
		return p.array()
	case c == '{':
		return p.inlineTable()
	case c == 't' && strings.HasPrefix(p.src[p.i:], "true"):
		p.i += 4
		return true, p.ends()
	case c == 'f' && strings.HasPrefix(p.src[p.i:], "false"):
		p.i += 5
		return false, p.ends()
	case c >= '0' && c <= '9' || c == '-' || c == '+':
		return p.number()
	}
	return nil, false
}

// ends reports whether a scalar has ended: BurntSushi/toml's lexer would
// have read any other character as part of it, or refused it.
func (p *parser) ends() bool {
	switch p.peek() {
	case ' ', '\t', '\r', '\n', '#', ',', ']', '}':
		return true
	}
	return p.eof()
}

// str reads a one-line string without escapes; its value is the text
// between the quotes, as BurntSushi/toml's (a copy).
func (p *parser) str(q byte) (any, bool) {
	if p.i+2 < len(p.src) && p.src[p.i+1] == q && p.src[p.i+2] == q {
		return nil, false // multi-line
	}
	p.i++
	start := p.i
	for p.i < len(p.src) {
		switch p.src[p.i] {
		case q:
			s := strings.Clone(p.src[start:p.i])
			p.i++
			return s, true
		case '\\':
			if q == '"' {
				return nil, false // an escape
			}
		case '\n', '\r':
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// number reads a decimal integer or a float such as -1.25.
func (p *parser) number() (any, bool) {
	start := p.i
	if c := p.peek(); c == '-' || c == '+' {
		p.i++
	}
	intStart := p.i
	if !digits(p) || p.src[intStart] == '0' && p.i-intStart > 1 {
		return nil, false // no digits, or a leading zero
	}
	float := p.peek() == '.'
	if float {
		p.i++
		if !digits(p) {
			return nil, false
		}
	}
	if !p.ends() {
		return nil, false // an exponent, underscores, a date, ...
	}
	s := p.src[start:p.i]
	if float {
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// digits reads one or more digits.
func digits(p *parser) bool {
	start := p.i
	for p.i < len(p.src) && p.src[p.i] >= '0' && p.src[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

func (p *parser) array() (any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.i++
	start := len(p.elems)
	for {
		p.blank()
		if p.peek() == ']' {
			p.i++
			break
		}
		at := p.pos()
		v, ok := p.value()
		if !ok {
			return nil, false
		}
		p.elems = append(p.elems, v)
		p.elemPos = append(p.elemPos, at)
		p.blank()
		if p.peek() == ',' {
			p.i++
			continue
		}
		if p.peek() != ']' {
			return nil, false
		}
		p.i++
		break
	}
	a := &Array{}
	if len(p.elems) > start {
		a.Elems = append([]any(nil), p.elems[start:]...)
		a.Pos = append([]Pos(nil), p.elemPos[start:]...)
	}
	clear(p.elems[start:])
	p.elems, p.elemPos = p.elems[:start], p.elemPos[:start]
	return a, p.ends()
}

func (p *parser) inlineTable() (any, bool) {
	if p.depth++; p.depth > maxDepth {
		return nil, false
	}
	defer func() { p.depth-- }()
	p.i++
	start := len(p.block)
	for {
		p.blank()
		if p.peek() == '}' {
			p.i++
			break
		}
		if !p.keyValue(start) {
			return nil, false
		}
		p.blank()
		if p.peek() == ',' {
			p.i++
			continue
		}
		if p.peek() != '}' {
			return nil, false
		}
		p.i++
		break
	}
	t := &Table{kind: kindValue}
	if len(p.block) > start {
		t.entries = append([]Entry(nil), p.block[start:]...)
	}
	clear(p.block[start:])
	p.block = p.block[:start]
	return t, p.ends()
}
