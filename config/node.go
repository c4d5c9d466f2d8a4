package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbdproject/lbd/config/internal/keypos"
	"github.com/lbdproject/lbd/config/internal/tree"
)

// source is one file being decoded: its name, its key positions and the
// errors found so far (shared by all files of one load). The positions are
// those of the tree itself when tree.Parse read the file, else keypos's.
type source struct {
	name string
	tree *tree.Table
	pos  map[string]keypos.Pos
	errs *errorSink
	// known is the empty sequence of a trie of the sequences of keys that
	// nodes are asked for, which most nodes share.
	known *knownKeys
	reals *realServers
	// refPos, shared by the files of a load, receives the positions of
	// the keys that name files (see keepPos); nil keeps none.
	refPos map[string]Pos
}

// at returns the position of path, or of its nearest ancestor that has one.
func (s *source) at(path string) Pos {
	if s.tree != nil {
		if p, ok := s.tree.Find(path); ok {
			return Pos{File: s.name, Line: int(p.Line), Col: int(p.Col)}
		}
		return Pos{File: s.name}
	}
	for p := path; p != ""; p = parent(p) {
		if kp, ok := s.pos[p]; ok {
			return Pos{File: s.name, Line: kp.Line, Col: kp.Col}
		}
	}
	if s.pos != nil && path == "" {
		// An empty key at the top ("" = 1, [""]) has no path to find it
		// by: the file's start stands in.
		return Pos{File: s.name, Line: 1, Col: 1}
	}
	return Pos{File: s.name}
}

func (s *source) knownRoot() *knownKeys {
	if s.known == nil {
		s.known = &knownKeys{}
	}
	return s.known
}

// knownKeys is a sequence of distinct keys, in the order a node was asked
// for them: the parent's sequence and one more key. Sequences are
// interned as a trie, so that the thousands of nodes of one kind that are
// asked for the same keys share one.
type knownKeys struct {
	key      string
	parent   *knownKeys
	children []*knownKeys
}

func (k *knownKeys) contains(key string) bool {
	for ; k.parent != nil; k = k.parent {
		if k.key == key {
			return true
		}
	}
	return false
}

// with returns the sequence of k and then key, which k does not contain.
func (k *knownKeys) with(key string) *knownKeys {
	for _, c := range k.children {
		if c.key == key {
			return c
		}
	}
	c := &knownKeys{key: key, parent: k}
	k.children = append(k.children, c)
	return c
}

func (k *knownKeys) list() []string {
	var out []string
	for ; k.parent != nil; k = k.parent {
		out = append(out, k.key)
	}
	slices.Reverse(out)
	return out
}

func parent(path string) string {
	if i := strings.LastIndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return ""
}

// node is one TOML table being decoded. Every key it is asked for counts
// as accepted, so unknown keys can be reported with the accepted list.
type node struct {
	src   *source
	path  string
	t     *tree.Table
	known *knownKeys // nil for none yet
}

func newNode(src *source, path string, t *tree.Table) *node {
	return &node{src: src, path: path, t: t}
}

func (n *node) keyPath(key string) string {
	if n.path == "" || key == "" {
		return n.path + key
	}
	if strings.HasPrefix(key, "[") {
		return n.path + key
	}
	return n.path + "." + key
}

// pos returns the position of key (or of the table when it is absent).
func (n *node) pos(key string) Pos { return n.src.at(n.keyPath(key)) }

func (n *node) errorf(key, format string, args ...any) {
	if n.src.errs.full() {
		n.src.errs.more++
		return
	}
	// A key path may be a piece of the file's text: cloned (and cut), an
	// error does not keep all of it alive.
	p := n.keyPath(key)
	n.src.errs.add(newError(n.src.at(p), strings.Clone(p), format, args...))
}

// keepPos records where key is, when it is written, for Config.CheckFiles.
func (n *node) keepPos(key string) {
	if n.src.refPos != nil && n.has(key) {
		n.src.refPos[n.keyPath(key)] = n.pos(key)
	}
}

func (n *node) has(key string) bool {
	_, ok := n.t.Get(key)
	return ok
}

func (n *node) get(key string) (any, bool) {
	if n.known == nil {
		n.known = n.src.knownRoot()
	}
	if !n.known.contains(key) {
		n.known = n.known.with(key)
	}
	return n.t.Get(key)
}

// finish reports the keys of the table that nobody asked for.
func (n *node) finish() {
	if n.known == nil {
		n.known = n.src.knownRoot()
	}
	unknown := false
	for _, e := range n.t.Entries() {
		if !n.known.contains(e.Key) {
			unknown = true
			break
		}
	}
	if !unknown {
		return
	}
	known := n.known.list()
	keys := make([]string, 0, n.t.Len())
	for _, e := range n.t.Entries() {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		msg := "unknown key"
		if s := suggest(k, known); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		where := "here"
		if n.path != "" {
			where = "in [" + strings.TrimRight(stripIndex(n.path), "]") + "]"
		}
		n.errorf(k, "%s; accepted %s: %s", whole(msg), whole(where), whole(strings.Join(known, ", ")))
	}
}

func stripIndex(path string) string {
	var b strings.Builder
	depth := 0
	for _, r := range path {
		switch {
		case r == '[':
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func typeName(v any) string {
	switch x := v.(type) {
	case string:
		return "a string"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case bool:
		return "a boolean"
	case *tree.Array:
		if x.Headers {
			return "an array of tables"
		}
		return "an array"
	case *tree.Table:
		return "a table"
	}
	return "a date/time"
}

func (n *node) wrongType(key string, v any, want string) {
	n.errorf(key, "is %s; expected %s", typeName(v), whole(want))
}

func (n *node) str(key string, dst *string) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	s, ok := v.(string)
	if !ok {
		n.wrongType(key, v, "a string")
		return false
	}
	// The string may be a piece of the file's text, which the
	// configuration must not keep alive.
	*dst = strings.Clone(s)
	return true
}

// oneOf decodes a string that must be one of accepted.
func (n *node) oneOf(key string, dst *string, accepted ...string) bool {
	var s string
	if !n.str(key, &s) {
		return false
	}
	i := slices.Index(accepted, s)
	if i < 0 {
		hint := ""
		if g := suggest(s, accepted); g != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", g)
		}
		n.errorf(key, "%q is not accepted%s; expected one of: %s", s, whole(hint), whole(strings.Join(accepted, ", ")))
		return false
	}
	*dst = accepted[i] // the same string, without a copy
	return true
}

func (n *node) integer(key string, dst *int, lo, hi int) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	i, ok := v.(int64)
	if !ok {
		n.wrongType(key, v, fmt.Sprintf("an integer from %d to %d", lo, hi))
		return false
	}
	if i < int64(lo) || i > int64(hi) {
		n.errorf(key, "%d is out of range; expected an integer from %d to %d", i, lo, hi)
		return false
	}
	*dst = int(i)
	return true
}

func (n *node) port(key string, dst *uint16) bool {
	var i int
	if !n.integer(key, &i, 1, 65535) {
		return false
	}
	*dst = uint16(i)
	return true
}

func (n *node) boolean(key string, dst *bool) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		n.wrongType(key, v, "true or false")
		return false
	}
	*dst = b
	return true
}

func (n *node) float(key string, dst *float64, lo, hi float64) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case int64:
		f = float64(x)
	default:
		n.wrongType(key, v, fmt.Sprintf("a number from %g to %g", lo, hi))
		return false
	}
	if f < lo || f > hi {
		n.errorf(key, "%g is out of range; expected a number from %g to %g", f, lo, hi)
		return false
	}
	*dst = f
	return true
}

// duration decodes a Go duration string such as "1.5s" or "3h".
func (n *node) duration(key string, dst *time.Duration, lo, hi time.Duration) bool {
	want := func() string {
		return fmt.Sprintf("a duration from %s to %s, such as \"%s\"", lo, hi, max(lo, time.Second))
	}
	if v, ok := n.get(key); ok && !isString(v) {
		n.wrongType(key, v, want())
		return false
	}
	var s string
	if !n.str(key, &s) {
		return false
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n.errorf(key, "%q is not a duration; expected %s", s, want())
		return false
	}
	if d < lo || d > hi {
		n.errorf(key, "%s is out of range; expected %s", s, want())
		return false
	}
	*dst = d
	return true
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// list decodes an array, calling elem for each element with its key
// ("key[i]"). A single value where an array is expected is an error: it is
// usually a forgotten pair of brackets.
func (n *node) list(key, want string, elem func(k string, v any)) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	arr, ok := v.(*tree.Array)
	if !ok || arr.Headers {
		n.wrongType(key, v, "an array of "+want)
		return false
	}
	for i, e := range arr.Elems {
		elem(key+"["+strconv.Itoa(i)+"]", e)
	}
	return true
}

func (n *node) strings(key string, dst *[]string) bool {
	var out []string
	ok := n.list(key, "strings", func(k string, v any) {
		if s, ok := v.(string); ok {
			out = append(out, strings.Clone(s))
		} else {
			n.wrongType(k, v, "a string")
		}
	})
	*dst = out
	return ok
}

// addr parses an IP address in value v found at key.
func (n *node) parseAddr(key string, v any) (netip.Addr, bool) {
	s, ok := v.(string)
	if !ok {
		n.wrongType(key, v, "an IP address string such as \"192.0.2.10\" or \"2001:db8::10\"")
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		n.errorf(key, "%q is not an IP address; expected one such as \"192.0.2.10\" or \"2001:db8::10\"", s)
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func (n *node) addr(key string, dst *netip.Addr) bool {
	v, ok := n.get(key)
	if !ok {
		return false
	}
	a, ok := n.parseAddr(key, v)
	if ok {
		*dst = a
	}
	return ok
}

// addrs decodes an array of IP addresses, and returns the key of each.
func (n *node) addrs(key string) (out []netip.Addr, keys []string) {
	n.list(key, "IP addresses", func(k string, v any) {
		if a, ok := n.parseAddr(k, v); ok {
			out = append(out, a)
			keys = append(keys, k)
		}
	})
	return out, keys
}

// prefixes decodes CIDRs; host bits must be zero so that a typo such as
// 10.1.2.0/16 (meant /24) is caught rather than silently widened.
func (n *node) prefixes(key string) []netip.Prefix {
	out, _ := n.prefixesAt(key)
	return out
}

// prefixesAt is prefixes, with the key of each.
func (n *node) prefixesAt(key string) (out []netip.Prefix, keys []string) {
	n.list(key, "CIDRs", func(k string, v any) {
		s, ok := v.(string)
		if !ok {
			n.wrongType(k, v, "a CIDR string such as \"10.0.0.0/8\"")
			return
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			n.errorf(k, "%q is not a CIDR; expected one such as \"10.0.0.0/8\" or \"2001:db8::/32\"", s)
			return
		}
		if p.Masked() != p {
			n.errorf(k, "%q has host bits set; expected the network address, %q", s, p.Masked().String())
			return
		}
		out = append(out, p)
		keys = append(keys, k)
	})
	return out, keys
}

// table returns the sub-table at key, or nil when it is absent.
func (n *node) table(key string) *node {
	v, ok := n.get(key)
	if !ok {
		return nil
	}
	t, ok := v.(*tree.Table)
	if !ok {
		n.wrongType(key, v, "a table ([..."+key+"])")
		return nil
	}
	return newNode(n.src, n.keyPath(key), t)
}

// tables returns the elements of an array of tables, written either as
// [[key]] headers or as an array of inline tables.
func (n *node) tables(key string) []*node {
	v, ok := n.get(key)
	if !ok {
		return nil
	}
	arr, ok := v.(*tree.Array)
	if !ok {
		n.wrongType(key, v, "an array of tables ([["+key+"]])")
		return nil
	}
	var out []*node
	base := n.keyPath(key)
	for i, e := range arr.Elems {
		if t, ok := e.(*tree.Table); ok {
			if out == nil {
				out = make([]*node, 0, len(arr.Elems))
			}
			out = append(out, newNode(n.src, base+"["+strconv.Itoa(i)+"]", t))
		} else {
			n.wrongType(key+"["+strconv.Itoa(i)+"]", e, "a table")
		}
	}
	return out
}
