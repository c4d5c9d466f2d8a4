// Package prescan bounds a TOML document before a parser sees it.
//
// TOML parsers keep, for every key, its whole dotted path (BurntSushi/toml
// as a string per key, keypos as one per key and array element), so that
// their memory grows with the sum of the path lengths: with the square of
// the nesting depth, or with a long key times the keys under it. A 64 KB
// file of nested inline tables took BurntSushi/toml 16 GB. Scan measures
// what drives that in one linear pass that understands strings and
// comments (brackets inside them do not count), and stops at the first
// limit exceeded. It does not validate: whatever it does not understand
// is left for the parser to refuse.
package prescan

// Limits bound one document.
type Limits struct {
	// Depth bounds nesting: each part of a [table] header or dotted key,
	// each array and each inline table is one level.
	Depth int
	// Values bounds the keys, table headers and array elements.
	Values int
	// PathBytes bounds the sum, over every key, header and array element,
	// of the length of its dotted path from the root.
	PathBytes int
}

// Limit names a limit of Limits.
type Limit uint8

const (
	NoLimit Limit = iota
	Depth
	Values
	PathBytes
)

// Result is what Scan measured; when Exceeded is not NoLimit, Line and Col
// (1-based, byte columns) are where it was exceeded and the counts are
// those up to there.
type Result struct {
	Exceeded  Limit
	Line, Col int
	MaxDepth  int
	Values    int
	PathBytes int
}

// level is an open array or inline table.
type level struct {
	table bool
	depth int
	path  int // bytes of the path of the values inside
	elems int // elements of an array so far
	// expect is set in an array when the next value starts an element.
	expect bool
}

type scanner struct {
	src       string
	i         int
	line      int
	lineStart int
	lim       Limits
	res       Result
	stack     []level
	// the current [table]: its depth and path bytes.
	hdrDepth, hdrPath int
	// the key being read, when inKey: its bytes and dots.
	inKey            bool
	keyBytes, keyDot int
	// the depth and path of the value after the latest '='.
	valDepth, valPath int
}

// Scan measures src against lim.
func Scan(src string, lim Limits) Result {
	s := &scanner{src: src, line: 1, lim: lim, inKey: true}
	for s.i < len(s.src) && s.res.Exceeded == NoLimit {
		s.step()
	}
	return s.res
}

func (s *scanner) step() {
	switch c := s.src[s.i]; c {
	case '\n':
		s.i++
		s.line++
		s.lineStart = s.i
		if len(s.stack) == 0 {
			s.startKey()
		}
	case ' ', '\t', '\r':
		s.i++
	case '#':
		for s.i < len(s.src) && s.src[s.i] != '\n' {
			s.i++
		}
	case '"', '\'':
		if !s.inKey {
			s.value()
		}
		n := s.str(c)
		if s.inKey {
			s.keyBytes += n
		}
	case '[':
		if len(s.stack) == 0 && s.inKey && s.keyBytes == 0 && s.keyDot == 0 {
			s.header()
		} else {
			s.open(false)
		}
	case '{':
		s.open(true)
	case ']', '}':
		s.i++
		if n := len(s.stack); n > 0 {
			s.stack = s.stack[:n-1]
		}
	case ',':
		s.i++
		if n := len(s.stack); n > 0 {
			if s.stack[n-1].table {
				s.startKey()
			} else {
				s.stack[n-1].expect = true
			}
		}
	case '=':
		s.i++
		if s.inKey {
			s.endKey()
		}
	default:
		s.i++
		switch {
		case !s.inKey:
			s.value()
		case c == '.':
			s.keyDot++
		default:
			s.keyBytes++
		}
	}
}

func (s *scanner) startKey() { s.inKey, s.keyBytes, s.keyDot = true, 0, 0 }

// base returns the depth and path bytes of what is directly inside the
// innermost open array or inline table, or the current [table].
func (s *scanner) base() (depth, path int) {
	if n := len(s.stack); n > 0 {
		return s.stack[n-1].depth, s.stack[n-1].path
	}
	return s.hdrDepth, s.hdrPath
}

// endKey counts the key that an '=' ends.
func (s *scanner) endKey() {
	depth, path := s.base()
	s.valDepth = depth + s.keyDot + 1
	s.valPath = path + s.keyBytes + s.keyDot + 1
	s.inKey = false
	s.count(s.valDepth, s.valPath)
}

// value notes that a value starts: in an array, a new element.
func (s *scanner) value() {
	n := len(s.stack)
	if n == 0 || s.stack[n-1].table || !s.stack[n-1].expect {
		return
	}
	l := &s.stack[n-1]
	l.expect = false
	l.elems++
	s.count(l.depth, l.path+digits(l.elems-1)+2)
}

// open opens an array or inline table, the value of a key or an element.
func (s *scanner) open(table bool) {
	s.value()
	depth, path := s.valDepth, s.valPath
	if n := len(s.stack); n > 0 && !s.stack[n-1].table {
		l := s.stack[n-1]
		depth, path = l.depth, l.path+digits(l.elems-1)+2
	}
	s.i++
	if depth+1 > s.lim.Depth {
		s.exceed(Depth, depth+1)
		return
	}
	s.res.MaxDepth = max(s.res.MaxDepth, depth+1)
	s.stack = append(s.stack, level{table: table, depth: depth + 1, path: path, expect: !table})
	if table {
		s.startKey()
	} else {
		s.inKey = false
	}
}

// header reads a [table] or [[array of tables]] header.
func (s *scanner) header() {
	s.i++
	if s.i < len(s.src) && s.src[s.i] == '[' {
		s.i++
	}
	parts, bytes := 1, 0
	for s.i < len(s.src) && s.src[s.i] != ']' && s.src[s.i] != '\n' {
		switch c := s.src[s.i]; c {
		case '"', '\'':
			bytes += s.str(c)
		case '.':
			parts++
			bytes++
			s.i++
		case ' ', '\t':
			s.i++
		default:
			bytes++
			s.i++
		}
	}
	for s.i < len(s.src) && s.src[s.i] == ']' {
		s.i++
	}
	s.hdrDepth, s.hdrPath = parts, bytes
	s.inKey = false
	s.count(parts, bytes)
}

// count counts a key, header or element at depth with a path of path
// bytes.
func (s *scanner) count(depth, path int) {
	s.res.Values++
	s.res.PathBytes += path
	s.res.MaxDepth = max(s.res.MaxDepth, depth)
	switch {
	case depth > s.lim.Depth:
		s.exceed(Depth, depth)
	case s.res.Values > s.lim.Values:
		s.exceed(Values, depth)
	case s.res.PathBytes > s.lim.PathBytes:
		s.exceed(PathBytes, depth)
	}
}

func (s *scanner) exceed(l Limit, depth int) {
	s.res.Exceeded = l
	s.res.Line = s.line
	s.res.Col = s.i - s.lineStart
	if s.res.Col < 1 {
		s.res.Col = 1
	}
	s.res.MaxDepth = max(s.res.MaxDepth, depth)
}

// str skips a string that starts at s.i with quote q (one-line or
// multi-line, basic or literal) and returns its length in bytes. An
// unterminated one-line string ends at the end of its line.
func (s *scanner) str(q byte) int {
	start := s.i
	triple := s.i+2 < len(s.src) && s.src[s.i+1] == q && s.src[s.i+2] == q
	if triple {
		s.i += 3
	} else {
		s.i++
	}
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\\' && q == '"':
			s.i++
			if s.i < len(s.src) && s.src[s.i] == '\n' {
				continue // a line-ending backslash; the newline is counted below
			}
		case c == '\n':
			if !triple {
				return s.i - start
			}
			s.line++
			s.lineStart = s.i + 1
		case c == q && !triple:
			s.i++
			return s.i - start
		case c == q && s.i+2 < len(s.src) && s.src[s.i+1] == q && s.src[s.i+2] == q:
			s.i += 3
			// Up to two more quotes close the string: """"" is legal.
			for n := 0; n < 2 && s.i < len(s.src) && s.src[s.i] == q; n++ {
				s.i++
			}
			return s.i - start
		}
		s.i++
	}
	return s.i - start
}

// digits is the number of decimal digits of n >= 0.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}
