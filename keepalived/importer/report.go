package importer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// Kind says what became of a keepalived statement lbd's TOML does not
// carry exactly.
type Kind int

const (
	// NotMapped: keepalived acts on it and lbd cannot express it; the
	// import is incomplete.
	NotMapped Kind = iota + 1
	// Ignored: a keyword the importer does not know here; keepalived 2.2.7
	// logs unknown keywords and carries on. The import is incomplete.
	Ignored
	// Differs: written, but lbd behaves differently in the way Why says.
	// The import stays complete.
	Differs
	// Unneeded: a setting lbd has no use for (keepalived's router_id,
	// mail settings). The import stays complete.
	Unneeded
)

func (k Kind) String() string {
	switch k {
	case NotMapped:
		return "not mapped"
	case Ignored:
		return "ignored"
	case Differs:
		return "differs"
	case Unneeded:
		return "not needed"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Incomplete reports whether an item of this kind leaves something of
// keepalived's behind.
func (k Kind) Incomplete() bool { return k == NotMapped || k == Ignored }

// Item is one statement the output does not carry exactly.
type Item struct {
	Pos     conf.Pos
	Keyword string // the statement's words, as written, cut to a line
	Kind    Kind
	Why     string
}

func (it Item) String() string {
	return fmt.Sprintf("%s: %s: %s: %s", it.Pos, it.Keyword, it.Kind, it.Why)
}

// Report lists the items in file order.
type Report struct{ Items []Item }

// Complete reports whether nothing was left out.
func (r Report) Complete() bool {
	for _, it := range r.Items {
		if it.Kind.Incomplete() {
			return false
		}
	}
	return true
}

// Count returns how many items are of kind k.
func (r Report) Count(k Kind) int {
	n := 0
	for _, it := range r.Items {
		if it.Kind == k {
			n++
		}
	}
	return n
}

// maxWords is how much of a statement an item repeats.
const maxWords = 80

// words is a node's statement as one line for a report.
func words(n *conf.Node) string {
	s := strings.Join(n.Words(), " ")
	if len(s) > maxWords {
		cut := maxWords
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// reporter collects items.
// reporter collects items, each once: a virtual server of a group that
// makes several services is read once per service.
type reporter struct {
	items []Item
	seen  map[Item]bool
}

func (r *reporter) add(n *conf.Node, k Kind, format string, args ...any) {
	it := Item{Pos: n.Pos, Keyword: words(n), Kind: k, Why: fmt.Sprintf(format, args...)}
	if r.seen[it] {
		return
	}
	if r.seen == nil {
		r.seen = map[Item]bool{}
	}
	r.seen[it] = true
	r.items = append(r.items, it)
}

func (r *reporter) notMapped(n *conf.Node, format string, args ...any) {
	r.add(n, NotMapped, format, args...)
}

func (r *reporter) differs(n *conf.Node, format string, args ...any) {
	r.add(n, Differs, format, args...)
}

// unknown reports a keyword the importer does not know in its context.
func (r *reporter) unknown(n *conf.Node, where string) {
	r.add(n, Ignored, "not a keyword lbd's importer knows in %s (keepalived 2.2.7 logs an unknown keyword and ignores it)", where)
}
