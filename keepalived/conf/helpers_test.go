package conf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// mainConf is where the tests' in-memory configuration starts.
const mainConf = "/etc/keepalived/keepalived.conf"

// parseFiles parses mainConf in an in-memory file system of the given
// files (paths below "/", no leading slash), with config id "main" unless
// opts says otherwise.
func parseFiles(t testing.TB, files map[string]string, opts Options) (*Config, error) {
	t.Helper()
	m := fstest.MapFS{}
	for name, text := range files {
		m[name] = &fstest.MapFile{Data: []byte(text), Mode: 0o644}
	}
	return parseMap(m, opts)
}

func parseMap(m fstest.MapFS, opts Options) (*Config, error) {
	opts.FS = MapFS(m)
	if opts.ConfigID == "" {
		opts.ConfigID = "main"
	}
	return Parse(mainConf, opts)
}

// parseText parses text as mainConf.
func parseText(t testing.TB, text string) (*Config, error) {
	t.Helper()
	return parseFiles(t, map[string]string{"etc/keepalived/keepalived.conf": text}, Options{})
}

// render writes a tree on one line: "kw arg arg { child; child }; next".
func render(nodes []Node) string {
	parts := make([]string, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		words := make([]string, 0, len(n.Args)+1)
		for _, w := range n.Words() {
			if w == "" || strings.ContainsAny(w, " \t;{}\"") {
				w = strconv.Quote(w)
			}
			words = append(words, w)
		}
		s := strings.Join(words, " ")
		if n.Block {
			s += " {"
			if len(n.Children) > 0 {
				s += " " + render(n.Children)
			}
			s += " }"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// positions lists "line keyword" for every node, depth first.
func positions(root *Node) []string {
	var out []string
	root.Walk(func(n *Node) bool {
		out = append(out, fmt.Sprintf("%s %s", n.Pos, n.Keyword))
		return true
	})
	return out
}

// problemList renders problems as "line kind severity" for comparison.
func problemList(cfg *Config, err error) []string {
	var out []string
	var list ErrorList
	errors.As(err, &list)
	for _, p := range list {
		out = append(out, fmt.Sprintf("%d %s %s", p.Pos.Line, p.Kind, p.Severity))
	}
	for _, p := range cfg.Warnings {
		out = append(out, fmt.Sprintf("%d %s %s", p.Pos.Line, p.Kind, p.Severity))
	}
	return out
}
