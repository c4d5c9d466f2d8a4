// Package tree is the compact form of a TOML document that lbd's decoder
// reads: tables as short lists of entries, arrays as slices, and the
// position of every key and array element beside it.
//
// Parse builds it directly from the text, for the plain TOML that lbd.toml
// files are made of, at a fraction of the memory of BurntSushi/toml's
// generic map tree and keypos's map of path strings. It is deliberately
// narrow: whatever it is not sure about (quoted or dotted keys, escapes,
// multi-line strings, dates, exponents, a table defined twice, a file that
// is not valid UTF-8 ...) makes it give up, and the caller then decodes the
// file with BurntSushi/toml and converts the result with FromMap. Whenever
// Parse succeeds, BurntSushi/toml accepts the document and decodes the same
// values, and the position of every path is the one keypos.Scan finds: the
// tests check both.
package tree

import (
	"strconv"
	"strings"
)

// Pos is a 1-based line and byte column; zero when unknown.
type Pos struct {
	Line, Col int32
}

// Entry is one key of a table with its value and the position of its key
// (of the header, for a table made by a [header]).
type Entry struct {
	Key string
	Val any
	Pos Pos
}

// Table is a TOML table. Values are string, int64, float64, bool, *Table,
// *Array, or (from FromMap only) date/time values.
type Table struct {
	entries []Entry
	kind    uint8
}

// Table kinds, which decide what a later header may do with a table.
const (
	kindImplicit uint8 = iota // made by a header's prefix, [a] in [a.b]
	kindHeader                // made by its own [header] or as the root
	kindValue                 // an inline table, immutable
	kindElement               // an element of an array of tables
)

// Array is a TOML array: a static array (key = [...]) or an array of
// tables made by [[headers]].
type Array struct {
	Elems []any
	Pos   []Pos // of each element; nil in trees made by FromMap
	// Headers is set for an array of tables made by [[headers]].
	Headers bool
}

// Get returns the value of key.
func (t *Table) Get(key string) (any, bool) {
	if e := t.entry(key); e != nil {
		return e.Val, true
	}
	return nil, false
}

func (t *Table) entry(key string) *Entry {
	for i := range t.entries {
		if t.entries[i].Key == key {
			return &t.entries[i]
		}
	}
	return nil
}

// Entries returns the table's entries in the order they were written; the
// caller must not modify them.
func (t *Table) Entries() []Entry { return t.entries }

// Len returns the number of keys.
func (t *Table) Len() int { return len(t.entries) }

// Drop forgets the table's contents so that the memory can be reused once
// they are decoded. Find does not look into a dropped table any more.
func (t *Table) Drop() { t.entries = nil }

// Find returns the position of path, a key path such as
// "service[2].real_server[0].address", or of its nearest ancestor that has
// one; ok is false when none has. It is the lookup that config's decoder
// did with keypos.Scan's map of path strings, and it cuts paths in the same
// way: at their last '.' or '['.
func (t *Table) Find(path string) (Pos, bool) {
	for p := path; p != ""; p = parent(p) {
		if pos, ok := t.exact(p); ok {
			return pos, true
		}
	}
	return Pos{}, false
}

func parent(path string) string {
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// exact returns the position of path itself. The keys of a tree that Parse
// made hold no '.' or '[' and are not empty, so each path names at most one
// key or element.
func (t *Table) exact(path string) (Pos, bool) {
	var v any = t
	var pos Pos
	for first := true; path != ""; first = false {
		switch x := v.(type) {
		case *Table:
			if !first {
				if path[0] != '.' {
					return Pos{}, false
				}
				path = path[1:]
			}
			i := strings.IndexAny(path, ".[")
			if i < 0 {
				i = len(path)
			}
			e := x.entry(path[:i])
			if i == 0 || e == nil {
				return Pos{}, false
			}
			v, pos, path = e.Val, e.Pos, path[i:]
		case *Array:
			j := strings.IndexByte(path, ']')
			if path[0] != '[' || j < 0 {
				return Pos{}, false
			}
			// Only the canonical spelling of an index names an element:
			// "x[1]" was a key of keypos's map, "x[01]" never.
			n, err := strconv.Atoi(path[1:j])
			if err != nil || n < 0 || n >= len(x.Elems) || n >= len(x.Pos) || strconv.Itoa(n) != path[1:j] {
				return Pos{}, false
			}
			v, pos, path = x.Elems[n], x.Pos[n], path[j+1:]
		default:
			return Pos{}, false
		}
	}
	return pos, true
}

// FromMap converts a tree decoded by BurntSushi/toml: map[string]any
// tables, []any arrays and []map[string]any arrays of tables. Positions are
// left unknown. It empties m as it goes, so that what is converted can be
// collected early.
func FromMap(m map[string]any) *Table {
	t := &Table{entries: make([]Entry, 0, len(m)), kind: kindHeader}
	for k, v := range m {
		t.entries = append(t.entries, Entry{Key: k, Val: fromAny(v)})
		delete(m, k)
	}
	return t
}

func fromAny(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return FromMap(x)
	case []map[string]any:
		a := &Array{Elems: make([]any, len(x)), Headers: true}
		for i, m := range x {
			a.Elems[i] = FromMap(m)
			x[i] = nil
		}
		return a
	case []any:
		a := &Array{Elems: make([]any, len(x))}
		for i, e := range x {
			a.Elems[i] = fromAny(e)
			x[i] = nil
		}
		return a
	}
	return v
}
