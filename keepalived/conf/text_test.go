package conf

import (
	"errors"
	"slices"
	"testing"
)

func TestDecomment(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		open     bool
	}{
		{"  \tweight 1  ", "weight 1", false},
		{"weight 1 # one", "weight 1", false},
		{"weight 1 ! one", "weight 1", false},
		{"# only a comment", "", false},
		{"! only a comment", "", false},
		{`notify "/bin/a # b" # c`, `notify "/bin/a # b"`, false},
		{`notify "/bin/a ! b"`, `notify "/bin/a ! b"`, false},
		{`a \# b`, `a # b`, false},
		{`a \! b`, `a ! b`, false},
		{`"a \# b"`, `"a \# b"`, false}, // not inside quotes
		{`a \\# b`, `a \\`, false},      // \\ is two bytes kept, then a comment
		{`$X=a   \`, `$X=a\`, false},    // blanks before a final backslash go
		{`a # comment \`, `a\`, false},  // 2.2.7 still sees the backslash after a comment
		{`a "b # c`, `a "b # c`, true},  // open quote: no comment
		{`a # "b`, `a`, false},          // quotes in a comment do not count
		{"a # ünïcödé ✓", "a", false},   // UTF-8 in comments
		{"α β # γ", "α β", false},       // and in words
		{"tab\tin\tline\t#x", "tab\tin\tline", false},
	} {
		got, open := decomment(tc.in)
		if got != tc.want || open != tc.open {
			t.Errorf("decomment(%q) = %q, %v; want %q, %v", tc.in, got, open, tc.want, tc.open)
		}
	}
}

func TestSplitWords(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		open bool
	}{
		{"a b\tc", []string{"a", "b", "c"}, false},
		{"a \f\v\r b", []string{"a", "b"}, false},
		{`misc_path "/bin/x a b"`, []string{"misc_path", "/bin/x a b"}, false},
		{`abc"def ghi" j`, []string{"abc", "def ghi", "j"}, false}, // a quote ends a word and starts one
		{`"" x`, []string{"", "x"}, false},
		{`a 'b c'`, []string{"a", "'b", "c'"}, false}, // single quotes are no quotes here
		{`a "b c`, []string{"a"}, true},
		{`a \"b c\"`, []string{"a", `\`, `b c\`}, false}, // no escapes
		{"   ", nil, false},
	} {
		got, open := splitWords(tc.in)
		if !slices.Equal(got, tc.want) || open != tc.open {
			t.Errorf("splitWords(%q) = %q, %v; want %q, %v", tc.in, got, open, tc.want, tc.open)
		}
	}
}

func TestSplitBrace(t *testing.T) {
	for _, tc := range []struct{ in, first, rest string }{
		{"real_server 1.2.3.4 80 { weight 1 }", "real_server 1.2.3.4 80", "{ weight 1 }"},
		{"{ weight 1 }", "{", "weight 1 }"},
		{"weight 1 }", "weight 1", "}"},
		{"}", "}", ""},
		{"{", "{", ""},
		{"}}", "}", "}"},
		{"{  \t", "{", ""},
		{"} else", "}", "else"},
		{"virtual_server 10.0.0.1 80{", "virtual_server 10.0.0.1 80", "{"},
		{`notify "/bin/x {a}" {`, `notify "/bin/x {a}"`, "{"},
		{`notify "/bin/x {a} {`, `notify "/bin/x {a} {`, ""}, // an open quote hides the rest
		{"plain", "plain", ""},
	} {
		first, rest := splitBrace(tc.in)
		if first != tc.first || rest != tc.rest {
			t.Errorf("splitBrace(%q) = %q, %q; want %q, %q", tc.in, first, rest, tc.first, tc.rest)
		}
	}
}

func TestIsInclude(t *testing.T) {
	for in, want := range map[string]bool{
		"include a":     true,
		"include\ta":    true,
		"includer a":    true,
		"includea a":    true,
		"includem\ta":   true,
		"includex a":    false,
		"include":       false,
		"includes":      false,
		"include_check": false,
		"includer":      false,
	} {
		if got := isInclude(in); got != want {
			t.Errorf("isInclude(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSplitQuoted(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  error
	}{
		{`notify_master "/bin/x a b" root`, []string{"notify_master", "/bin/x a b", "root"}, nil},
		{`misc_path '/bin/x "a b"'`, []string{"misc_path", `/bin/x "a b"`}, nil},
		{`abcd" efg h jkl "mnop`, []string{"abcd efg h jkl mnop"}, nil}, // keepalived.conf(5)'s example
		{`a\ b c`, []string{"a b", "c"}, nil},
		{`"a\"b"`, []string{`a"b`}, nil},
		{`\n\t\a\b\E\f\r\v`, []string{"\n\t\a\b\x1b\f\r\v"}, nil},
		{`\x41\x4a\101\cA\q`, []string{"AJA\x01q"}, nil},
		{`\x414`, []string{"\x14"}, nil}, // 2.2.7 takes every hex digit, in 8 bits
		{`\777`, []string{"\xff"}, nil},  // octal wraps too
		{`\xg`, []string{"xg"}, nil},
		{`a "b`, nil, ErrOpenQuote},
		{`a 'b`, nil, ErrOpenQuote},
		{`a\`, nil, ErrTrailingEscape},
		{"  ", nil, nil},
	} {
		got, err := SplitQuoted(tc.in)
		if !slices.Equal(got, tc.want) || !errors.Is(err, tc.err) {
			t.Errorf("SplitQuoted(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}
