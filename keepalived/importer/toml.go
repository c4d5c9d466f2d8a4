package importer

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// tomlString quotes s as a TOML basic string. Control characters and
// invalid UTF-8 (replaced by U+FFFD) cannot stand in one unescaped.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, string(utf8.RuneError)) {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// comment is s as one TOML comment line: TOML allows no control
// characters but tab in a comment, and only UTF-8.
func comment(s string) string {
	s = strings.ToValidUTF8(s, string(utf8.RuneError))
	return "# " + strings.Map(func(r rune) rune {
		if r < 0x20 && r != '\t' || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "\n"
}

func tomlStrings(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = tomlString(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// tomlDuration writes d as lbd's duration string.
func tomlDuration(d time.Duration) string { return tomlString(d.String()) }

// kv is one "key = value" line, the value already in TOML.
type kv struct{ key, value string }

// table is a TOML table's lines in the order written.
type table []kv

func (t *table) set(key, value string) { *t = append(*t, kv{key, value}) }
func (t *table) str(key, value string) { t.set(key, tomlString(value)) }
func (t *table) num(key string, n int64) {
	t.set(key, strconv.FormatInt(n, 10))
}

func (t table) write(b *strings.Builder, prefix string) {
	for _, l := range t {
		b.WriteString(prefix + l.key + " = " + l.value + "\n")
	}
}
