package conf

import "slices"

// Node is one statement of a keepalived configuration: a line of words,
// with the block that follows it if there is one.
type Node struct {
	// Keyword is the first word of the line, Args the others, split as
	// keepalived splits them for every keyword (quotes "..." group words
	// and are removed; there are no escapes).
	Keyword string
	Args    []string
	// Raw is the line as keepalived hands it to the keyword's handler: after
	// comments, conditionals and substitution, without its braces. Keywords
	// that run scripts split it again with SplitQuoted.
	Raw string
	Pos Pos
	// Block says that a '{' followed the line; Children are the statements
	// inside it (none for an empty block).
	Block    bool
	Children []Node
}

// Config is a configuration as read, with everything worth telling about
// how it was read.
type Config struct {
	// Root holds the top-level statements as its Children.
	Root Node
	// Files lists every file read, in the order keepalived reads them; a
	// file included twice is listed twice.
	Files []string
	// Warnings are problems keepalived 2.2.7 tolerates (see Severity).
	Warnings []Problem
}

// Words returns the keyword and the arguments as one list.
func (n *Node) Words() []string {
	return append([]string{n.Keyword}, n.Args...)
}

// Arg returns the i-th argument (0 is the first after the keyword).
func (n *Node) Arg(i int) (string, bool) {
	if i < 0 || i >= len(n.Args) {
		return "", false
	}
	return n.Args[i], true
}

// Child returns the first child whose keyword is one of keywords (old and
// new spellings, such as "lb_algo", "lvs_sched"), or nil.
func (n *Node) Child(keywords ...string) *Node {
	for i := range n.Children {
		if slices.Contains(keywords, n.Children[i].Keyword) {
			return &n.Children[i]
		}
	}
	return nil
}

// ChildrenOf returns every child whose keyword is one of keywords, in order.
func (n *Node) ChildrenOf(keywords ...string) []*Node {
	var out []*Node
	for i := range n.Children {
		if slices.Contains(keywords, n.Children[i].Keyword) {
			out = append(out, &n.Children[i])
		}
	}
	return out
}

// Walk calls fn for every node below n, parents before their children, in
// file order; fn returning false skips that node's children.
func (n *Node) Walk(fn func(*Node) bool) {
	for i := range n.Children {
		c := &n.Children[i]
		if fn(c) {
			c.Walk(fn)
		}
	}
}
