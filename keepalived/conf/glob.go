package conf

import (
	"io/fs"
	"slices"
	"strings"
)

// Bounds keepalived does not have: braces multiply (ten {a,b} make 1,024
// patterns), '*' in directories walks trees, and includes repeat.
const (
	maxGlobPatterns = 1024    // for one include
	maxGlobCalls    = 100_000 // file system calls, for all includes
)

// globber is glibc's glob(3) as keepalived calls it (GLOB_MARK |
// GLOB_BRACE | GLOB_ALTDIRFUNC, no GLOB_PERIOD, no ~), in keepalived's
// working directory base, with what keepalived's directory callbacks count.
type globber struct {
	fs   FS
	base string
	// paths are the matches as glob returns them: relative to base when
	// the pattern is, '/' after a directory, sorted within each {,}
	// alternative, alternatives in their order.
	paths []string
	// missing counts names that do not exist and directories that do not
	// open (keepalived's missing_files and missing_directories).
	missing int
	// wildcards says that a directory was read (keepalived's
	// have_wildcards).
	wildcards bool
	// budget is how many file system calls it may still make.
	budget int
}

// spend takes one call from the budget; false when there is none left.
func (g *globber) spend() bool {
	g.budget--
	return g.budget >= 0
}

// resolve is where keepalived, in directory base, finds a path.
func resolve(base, p string) string {
	switch {
	case base == "" || strings.HasPrefix(p, "/"):
		return p
	case base == "/":
		return "/" + p
	}
	return base + "/" + p
}

// glob adds the matches of pattern; false when the pattern exceeds the
// bounds.
func (g *globber) glob(pattern string) bool {
	var leaves []string
	if !expandBraces(pattern, &leaves) {
		return false
	}
	for _, leaf := range leaves {
		start := len(g.paths)
		onlyDir := false
		if len(leaf) > 1 && strings.HasSuffix(leaf, "/") {
			leaf, onlyDir = strings.TrimRight(leaf, "/"), true
			if leaf == "" {
				leaf = "/"
			}
		}
		for _, p := range g.leaf(leaf, onlyDir) {
			if !g.spend() {
				return false
			}
			if fi, err := g.fs.Stat(resolve(g.base, p)); err == nil && fi.IsDir() {
				p += "/"
			}
			g.paths = append(g.paths, p)
		}
		slices.Sort(g.paths[start:]) // strcoll in the C locale: bytes
		if g.budget < 0 {
			return false
		}
	}
	return true
}

// expandBraces adds the patterns of csh-style {a,b} alternatives to out in
// glibc's order; a '{' without its '}' is an ordinary byte.
func expandBraces(pattern string, out *[]string) bool {
	begin := -1
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == '\\' && i+1 < len(pattern) {
			i++
		} else if pattern[i] == '{' {
			begin = i
			break
		}
	}
	next := -1
	if begin >= 0 {
		next = nextBraceSub(pattern, begin+1)
	}
	rest := next
	for rest >= 0 && pattern[rest] != '}' {
		rest = nextBraceSub(pattern, rest+1)
	}
	if rest < 0 {
		if len(*out) >= maxGlobPatterns {
			return false
		}
		*out = append(*out, pattern)
		return true
	}
	for p := begin + 1; ; {
		if !expandBraces(pattern[:begin]+pattern[p:next]+pattern[rest+1:], out) {
			return false
		}
		if pattern[next] == '}' {
			return true
		}
		p = next + 1
		next = nextBraceSub(pattern, p)
	}
}

// nextBraceSub is glibc's next_brace_sub(): the index of the ',' or '}'
// that ends the alternative starting at i, -1 if none.
func nextBraceSub(pattern string, i int) int {
	depth := 0
	for ; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
			if i >= len(pattern) {
				return -1
			}
		case '}':
			if depth == 0 {
				return i
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		case '{':
			depth++
		}
	}
	return -1
}

// Kinds of glob pattern, as glibc's __glob_pattern_type() tells them.
const (
	metaSpecial   = 1 // '*', '?', or a closed [...]
	metaBackslash = 2
	metaBracket   = 4
)

func metaType(s string) int {
	ret := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '?', '*':
			return metaSpecial
		case '\\':
			if i+1 < len(s) {
				i++
			}
			ret |= metaBackslash
		case '[':
			ret |= metaBracket
		case ']':
			if ret&metaBracket != 0 {
				return metaSpecial
			}
		}
	}
	return ret
}

// leaf globs a pattern without braces: the directory part first (itself
// a pattern when it has wildcards), then the last name in each directory.
func (g *globber) leaf(pattern string, onlyDir bool) []string {
	if pattern == "" {
		return nil
	}
	if pattern == "/" {
		return []string{"/"}
	}
	slash := strings.LastIndexByte(pattern, '/')
	dirs, file := []string{"."}, pattern
	switch {
	case slash == 0:
		dirs, file = []string{"/"}, pattern[1:]
	case slash > 0:
		dir := pattern[:slash]
		file = pattern[slash+1:]
		if metaType(dir)&(metaSpecial|metaBracket) != 0 {
			dirs = g.leaf(dir, true)
		} else {
			dirs = []string{unescapeGlob(dir)}
		}
	}
	var out []string
	for _, d := range dirs {
		for _, name := range g.inDir(file, d, onlyDir) {
			switch {
			case slash < 0:
				out = append(out, name)
			case d == "/":
				out = append(out, "/"+name)
			default:
				out = append(out, d+"/"+name)
			}
		}
	}
	return out
}

// inDir is glibc's glob_in_dir(): a name without wildcards is looked up
// (lstat), one with them is matched against the directory's entries,
// "." and ".." included.
func (g *globber) inDir(pattern, dir string, onlyDir bool) []string {
	full := resolve(g.base, dir)
	if !g.spend() {
		return nil
	}
	if metaType(pattern) == 0 {
		if _, err := g.fs.Lstat(full + "/" + pattern); err != nil {
			g.missing++
			return nil
		}
		return []string{pattern}
	}
	g.wildcards = true
	entries, err := g.fs.ReadDir(full)
	if err != nil {
		g.missing++
		return nil
	}
	var out []string
	for _, name := range []string{".", ".."} {
		if fnmatch(pattern, name) {
			out = append(out, name)
		}
	}
	for _, e := range entries {
		if !fnmatch(pattern, e.Name()) || onlyDir && !g.isDir(full, e) {
			continue
		}
		out = append(out, e.Name())
	}
	return out
}

// isDir says whether an entry is a directory, following a symbolic link.
func (g *globber) isDir(dir string, e fs.DirEntry) bool {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.IsDir()
	}
	if !g.spend() {
		return false
	}
	fi, err := g.fs.Stat(dir + "/" + e.Name())
	return err == nil && fi.IsDir()
}

// unescapeGlob removes the quoting backslashes of a directory name without
// wildcards.
func unescapeGlob(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			if i == len(s) {
				break
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
