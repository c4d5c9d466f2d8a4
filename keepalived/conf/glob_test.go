package conf

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestFnmatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"*.conf", "a.conf", true},
		{"*.conf", "a.conf.bak", false},
		{"*.conf", ".a.conf", false}, // FNM_PERIOD
		{".*", ".a.conf", true},
		{`\.*`, ".a", true},
		{"?a", ".a", false},
		{"[.]a", ".a", false},
		{"*", ".", false},
		{".*", "..", true},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"**a", "bba", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"[abc]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[!a-c]x", "dx", true},
		{"[^a-c]x", "ax", false},
		{"[]]x", "]x", true},
		{"[!]]x", "]x", false},
		{"[a-]x", "-x", true},
		{`[\]]x`, "]x", true},
		{"[[:digit:]][[:alpha:]]", "1a", true},
		{"[[:digit:]]", "a", false},
		{"[[:bogus:]]", "a", false},
		{"[[:upper:][:space:]]", " ", true},
		{"[[.a.]]", "a", true},
		{"[ab", "[ab", true}, // an unclosed '[' is itself
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{`a\`, `a\`, false}, // a trailing backslash matches nothing
		{"é*", "été", true},
		{"[é]", "é", false}, // bytes, not characters, in the C locale
	} {
		if got := fnmatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("fnmatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestExpandBraces(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a.conf", []string{"a.conf"}},
		{"{b,a}.conf", []string{"b.conf", "a.conf"}},
		{"x{,cat,dog}", []string{"x", "xcat", "xdog"}},
		{"{foo/{,cat,dog},bar}", []string{"foo/", "foo/cat", "foo/dog", "bar"}}, // keepalived.conf(5)'s example
		{"{a,b}{1,2}", []string{"a1", "a2", "b1", "b2"}},
		{"{a,b", []string{"{a,b"}},
		{`\{a,b}`, []string{`\{a,b}`}},
		{`{a\,b,c}`, []string{`a\,b`, "c"}},
		{"{a}", []string{"a"}},
		{"{}", []string{""}},
	} {
		var got []string
		if !expandBraces(tc.in, &got) || !slices.Equal(got, tc.want) {
			t.Errorf("expandBraces(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var many []string
	if expandBraces(strings.Repeat("{a,b}", 11), &many) {
		t.Errorf("2048 patterns expanded: want refused beyond %d", maxGlobPatterns)
	}
}

// What keepalived's glob() returns and counts.
func TestGlob(t *testing.T) {
	m := fstest.MapFS{
		"k/conf.d/a.conf":   {},
		"k/conf.d/b.conf":   {},
		"k/conf.d/sub/c.cf": {},
		"k/other/d.conf":    {},
		"k/weird[1]/e.conf": {},
	}
	for _, tc := range []struct {
		pattern   string
		paths     []string
		missing   int
		wildcards bool
	}{
		{"conf.d/*.conf", []string{"conf.d/a.conf", "conf.d/b.conf"}, 0, true},
		{"*/*.conf", []string{"conf.d/a.conf", "conf.d/b.conf", "other/d.conf", "weird[1]/e.conf"}, 0, true},
		{"*/sub/*", []string{"conf.d/sub/c.cf"}, 2, true}, // other/sub and weird[1]/sub are missing
		{"conf.d/*", []string{"conf.d/a.conf", "conf.d/b.conf", "conf.d/sub/"}, 0, true},
		{"conf.d", []string{"conf.d/"}, 0, false},
		{"conf.d/", []string{"conf.d/"}, 0, false},
		{"none.conf", nil, 1, false},
		{"none/*.conf", nil, 1, true},
		{"conf.d/*.none", nil, 0, true},
		{"/k/conf.d/a.conf", []string{"/k/conf.d/a.conf"}, 0, false},
		{"{other,conf.d}/*.conf", []string{"other/d.conf", "conf.d/a.conf", "conf.d/b.conf"}, 0, true},
		{"{conf.d/a,none}.conf", []string{"conf.d/a.conf"}, 1, false},
		{`weird\[1\]/e.conf`, []string{"weird[1]/e.conf"}, 0, false},
		{`weird[[]1]/*`, []string{"weird[1]/e.conf"}, 0, true},
		{"", nil, 0, false},
	} {
		g := globber{fs: MapFS(m), base: "/k", budget: maxGlobCalls}
		if !g.glob(tc.pattern) || !slices.Equal(g.paths, tc.paths) || g.missing != tc.missing || g.wildcards != tc.wildcards {
			t.Errorf("glob(%q) = %q, missing %d, wildcards %v; want %q, %d, %v",
				tc.pattern, g.paths, g.missing, g.wildcards, tc.paths, tc.missing, tc.wildcards)
		}
	}
	g := globber{fs: MapFS(m), base: "/k", budget: 3}
	if g.glob("*/*") {
		t.Error("glob(*/*) within a budget of 3 calls")
	}
}
