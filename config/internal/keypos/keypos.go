// Package keypos finds where each key of a TOML document is written.
//
// BurntSushi/toml decodes TOML but keeps key positions to itself (and keeps
// only the last element's for arrays of tables), so lbd's error messages get
// their file:line from this small scanner instead. It runs only on documents
// that BurntSushi/toml already accepted, so it does not validate: on anything
// it does not understand it stops and returns what it found so far.
//
// Paths join keys with dots and index arrays: the third [[service]] table's
// port is "service[2].port", the second element of its vips array is
// "service[2].vips[1]", and the table itself is "service[2]".
package keypos

import (
	"strconv"
	"strings"
)

// Pos is a 1-based line and byte column.
type Pos struct {
	Line, Col int
}

// Scan returns the position of every key, table header and array element in
// src, keyed by path.
func Scan(src string) map[string]Pos {
	s := &scanner{
		src:    src,
		line:   1,
		col:    1,
		out:    make(map[string]Pos),
		arrays: make(map[string]int),
	}
	s.document()
	return s.out
}

type scanner struct {
	src       string
	i         int
	line, col int
	out       map[string]Pos
	// arrays counts the elements of each array of tables, so that a later
	// header like [service.health_check] resolves to the latest service.
	arrays map[string]int
	table  string // path of the current table
}

func (s *scanner) eof() bool { return s.i >= len(s.src) }

func (s *scanner) peek() byte {
	if s.eof() {
		return 0
	}
	return s.src[s.i]
}

func (s *scanner) next() {
	if s.eof() {
		return
	}
	if s.src[s.i] == '\n' {
		s.line++
		s.col = 1
	} else {
		s.col++
	}
	s.i++
}

func (s *scanner) pos() Pos { return Pos{s.line, s.col} }

func (s *scanner) hasPrefix(p string) bool { return strings.HasPrefix(s.src[s.i:], p) }

// skip passes spaces and tabs, and newlines and comments when nl is set.
func (s *scanner) skip(nl bool) {
	for !s.eof() {
		switch c := s.peek(); {
		case c == ' ' || c == '\t' || c == '\r':
			s.next()
		case c == '#':
			for !s.eof() && s.peek() != '\n' {
				s.next()
			}
		case c == '\n' && nl:
			s.next()
		default:
			return
		}
	}
}

// record notes where path is first written. Tables that a header or a
// dotted key creates implicitly ([a.b] creates a) are placed there too.
func (s *scanner) record(path string, p Pos) {
	for path != "" {
		if _, ok := s.out[path]; ok {
			return
		}
		s.out[path] = p
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return
		}
		path = path[:i]
	}
}

func (s *scanner) document() {
	for {
		s.skip(true)
		if s.eof() {
			return
		}
		start := s.i
		switch {
		case s.hasPrefix("[["):
			s.arrayHeader()
		case s.peek() == '[':
			s.tableHeader()
		default:
			s.keyValue(s.table)
		}
		if s.i == start { // not understood: stop rather than loop
			return
		}
	}
}

func (s *scanner) tableHeader() {
	p := s.pos()
	s.next()
	keys, ok := s.keys()
	if !ok || s.peek() != ']' {
		s.i = len(s.src)
		return
	}
	s.next()
	s.table = s.resolve(keys)
	s.record(s.table, p)
}

func (s *scanner) arrayHeader() {
	p := s.pos()
	s.next()
	s.next()
	keys, ok := s.keys()
	if !ok || !s.hasPrefix("]]") {
		s.i = len(s.src)
		return
	}
	s.next()
	s.next()
	parent := s.resolve(keys[:len(keys)-1])
	base := join(parent, keys[len(keys)-1])
	n := s.arrays[base]
	s.arrays[base] = n + 1
	s.table = base + "[" + strconv.Itoa(n) + "]"
	s.record(base, p)
	s.record(s.table, p)
}

// resolve turns header keys into a path, stepping into the latest element
// of every array of tables on the way.
func (s *scanner) resolve(keys []string) string {
	path := ""
	for _, k := range keys {
		path = join(path, k)
		if n, ok := s.arrays[path]; ok {
			path += "[" + strconv.Itoa(n-1) + "]"
		}
	}
	return path
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

// keys reads a dotted key, e.g. a."b.c".d, and the spaces after it.
func (s *scanner) keys() ([]string, bool) {
	var keys []string
	for {
		s.skip(false)
		k, ok := s.key()
		if !ok {
			return nil, false
		}
		keys = append(keys, k)
		s.skip(false)
		if s.peek() != '.' {
			return keys, true
		}
		s.next()
	}
}

func (s *scanner) key() (string, bool) {
	switch c := s.peek(); {
	case c == '"' || c == '\'':
		return s.quoted(c)
	case isBare(c):
		start := s.i
		for !s.eof() && isBare(s.peek()) {
			s.next()
		}
		return s.src[start:s.i], true
	}
	return "", false
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// quoted reads a one-line string and returns its raw content; keys in lbd's
// schema never need unescaping to be matched.
func (s *scanner) quoted(q byte) (string, bool) {
	s.next()
	start := s.i
	for !s.eof() {
		c := s.peek()
		switch {
		case c == '\n':
			return "", false
		case c == '\\' && q == '"':
			s.next()
		case c == q:
			v := s.src[start:s.i]
			s.next()
			return v, true
		}
		s.next()
	}
	return "", false
}

func (s *scanner) keyValue(table string) bool {
	p := s.pos()
	keys, ok := s.keys()
	if !ok || s.peek() != '=' {
		s.i = len(s.src)
		return false
	}
	s.next()
	path := table
	for _, k := range keys {
		path = join(path, k)
	}
	s.record(path, p)
	s.skip(false)
	return s.value(path)
}

// value skips one value, recording the elements of arrays and the keys of
// inline tables under path.
func (s *scanner) value(path string) bool {
	switch {
	case s.hasPrefix(`"""`):
		return s.multiline(`"""`)
	case s.hasPrefix(`'''`):
		return s.multiline(`'''`)
	case s.peek() == '"' || s.peek() == '\'':
		_, ok := s.quoted(s.peek())
		return ok
	case s.peek() == '[':
		return s.array(path)
	case s.peek() == '{':
		return s.inlineTable(path)
	}
	start := s.i
	for !s.eof() && !strings.ContainsRune(",]}\n#", rune(s.peek())) {
		s.next()
	}
	return s.i > start
}

func (s *scanner) multiline(delim string) bool {
	for range delim {
		s.next()
	}
	for !s.eof() {
		if delim == `"""` && s.peek() == '\\' {
			s.next()
			s.next()
			continue
		}
		if s.hasPrefix(delim) {
			for range delim {
				s.next()
			}
			// Up to two more quotes may close the string (""""" is legal).
			for n := 0; n < 2 && s.peek() == delim[0]; n++ {
				s.next()
			}
			return true
		}
		s.next()
	}
	return false
}

func (s *scanner) array(path string) bool {
	s.next()
	for n := 0; ; n++ {
		s.skip(true)
		if s.peek() == ']' {
			s.next()
			return true
		}
		elem := path + "[" + strconv.Itoa(n) + "]"
		s.record(elem, s.pos())
		if !s.value(elem) {
			return false
		}
		s.skip(true)
		switch s.peek() {
		case ',':
			s.next()
		case ']':
			s.next()
			return true
		default:
			return false
		}
	}
}

func (s *scanner) inlineTable(path string) bool {
	s.next()
	for {
		s.skip(true)
		switch s.peek() {
		case '}':
			s.next()
			return true
		case ',':
			s.next()
			continue
		}
		start := s.i
		if !s.keyValue(path) || s.i == start {
			return false
		}
	}
}
