package conf

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"strings"
)

// includeFlags are keepalived's include checks (include_check, the include
// variants, -e): which include failures are configuration errors.
type includeFlags uint8

const (
	incRead     includeFlags = 1 << iota // a match is not a readable regular file
	incMatch                             // a name without wildcards is missing
	incWildcard                          // a pattern with wildcards matches nothing
	incBrace                             // a {,} alternative is missing: then nothing is read
	incAll      = incRead | incMatch | incWildcard | incBrace
)

// globFrame is one include (or the top file) on keepalived's include
// stack: the files its pattern matched, read one after the other.
type globFrame struct {
	pattern string
	at      Pos // the include line; the top file has Line 0
	kind    includeFlags
	saved   includeFlags // include_check when the include was read
	base    string       // the directory the pattern is resolved in
	paths   []string
	next    int
	file    *fileFrame
}

// fileFrame is a file being read.
type fileFrame struct {
	name string // the path keepalived opens, from lbd's working directory
	dir  string // the directory keepalived changes into for it
	id   fileID
	data []byte
	off  int
	line int // the number of the line the next read belongs to
}

// fileID tells whether two paths are the same file.
type fileID struct {
	info fs.FileInfo
	real string
}

func (a fileID) same(b fileID) bool {
	return os.SameFile(a.info, b.info) || a.real != "" && a.real == b.real
}

// curDir is keepalived's working directory: the directory of the file
// being read ("" is lbd's own).
func (r *reader) curDir() string {
	for i := len(r.stack) - 1; i >= 0; i-- {
		if f := r.stack[i].file; f != nil {
			return f.dir
		}
	}
	return ""
}

// openGlob starts reading the files pattern matches, as keepalived's
// open_glob_file() does (the top file is read the same way).
func (r *reader) openGlob(pattern string, kind includeFlags, at Pos) {
	if len(r.stack) >= r.lim.MaxIncludeDepth {
		r.probs.errorf(at, KindLimit, "includes nest deeper than %d: lbd reads no further here", r.lim.MaxIncludeDepth)
		return
	}
	fr := &globFrame{pattern: pattern, at: at, kind: kind, saved: r.includeCheck, base: r.curDir()}
	// Pushed before the checks, as in keepalived: its kind decides them.
	r.stack = append(r.stack, fr)
	g := globber{fs: r.fs, base: fr.base, budget: r.globBudget}
	ok := g.glob(pattern)
	r.globBudget = max(g.budget, 0)
	if !ok {
		r.stack = r.stack[:len(r.stack)-1]
		if r.globBudget == 0 {
			r.fail(at, "include %q: looking for included files took more than %d file system calls; lbd reads no further", pattern, maxGlobCalls)
			return
		}
		r.probs.errorf(at, KindLimit, "include %q makes more than %d patterns; lbd reads nothing here", pattern, maxGlobPatterns)
		return
	}
	fr.paths = g.paths
	if !r.checkGlob(fr, &g) || !r.openNext(fr) {
		r.stack = r.stack[:len(r.stack)-1]
	}
}

// checkGlob reports what keepalived's open_and_check_glob() reports, and
// says whether to read the matches.
func (r *reader) checkGlob(fr *globFrame, g *globber) bool {
	if len(g.paths) == 0 {
		switch {
		case g.missing > 0 && hasBrace(fr.pattern):
			r.includeProblem(fr, incBrace, "include %q: no such file", fr.pattern)
		case g.missing > 0:
			r.includeProblem(fr, incMatch, "include %q: no such file", fr.pattern)
		case g.wildcards:
			r.includeProblem(fr, incWildcard, "include %q matches no file", fr.pattern)
		default:
			r.includeProblem(fr, 0, "include %q matches no file", fr.pattern)
		}
		return false
	}
	if g.missing > 0 {
		r.includeProblem(fr, incBrace, "include %q: some of its files are missing", fr.pattern)
		if (r.includeCheck|fr.kind)&incBrace != 0 {
			return false
		}
	}
	if fr.at.Line == 0 && len(g.paths) > 1 {
		r.probs.errorf(fr.at, KindInclude, "%q matches %d files: keepalived reads them all, starting with %s, and -t reports it", fr.pattern, len(g.paths), g.paths[0])
	}
	return true
}

// hasBrace is keepalived's have_brace(): a '{' not after a backslash.
func hasBrace(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == '\\' {
			i++
		} else if pattern[i] == '{' {
			return true
		}
	}
	return false
}

// includeProblem reports an include failure: an error when an include
// check covers it (keepalived then reports it and -t fails), else a
// warning (keepalived reads on; it logs some of these, not all).
func (r *reader) includeProblem(fr *globFrame, check includeFlags, format string, args ...any) {
	if (r.includeCheck|fr.kind)&check != 0 {
		r.probs.errorf(fr.at, KindInclude, format+"; with its include checks keepalived refuses to start", args...)
		return
	}
	r.probs.warnf(fr.at, KindInclude, format+"; keepalived reads on", args...)
}

// openNext opens the next readable match of fr, as keepalived's
// open_conf_file() does; false when there is none.
func (r *reader) openNext(fr *globFrame) bool {
	for fr.next < len(fr.paths) && !r.fatal {
		p := fr.paths[fr.next]
		fr.next++
		full := resolve(fr.base, p)
		info, ok := r.checkFile(fr, p, full)
		if !ok {
			continue
		}
		id := fileID{info: info}
		id.real, _ = r.fs.Realpath(full)
		if r.reading(id) {
			r.probs.errorf(fr.at, KindIncludeLoop, "include %q: %s includes itself (keepalived would recurse until it runs out of file descriptors); lbd skips it", fr.pattern, full)
			continue
		}
		data, err := r.readFile(full)
		if r.fatal {
			return false
		}
		if err != nil {
			r.includeProblem(fr, incRead, "include %q: %s: %v", fr.pattern, full, err)
			continue
		}
		fr.file = &fileFrame{name: full, dir: dirOf(full), id: id, data: data, line: 1}
		r.files = append(r.files, full)
		return true
	}
	return false
}

// checkFile is keepalived's check_glob_file(): it reads only regular
// files without any execute permission.
func (r *reader) checkFile(fr *globFrame, p, full string) (fs.FileInfo, bool) {
	if strings.HasSuffix(p, "/") {
		r.includeProblem(fr, incRead, "include %q: %s is a directory, which keepalived skips", fr.pattern, full)
		return nil, false
	}
	info, err := r.fs.Stat(full)
	if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 != 0 {
		r.includeProblem(fr, incRead, "include %q: %s is not a regular file without execute permission, which keepalived skips", fr.pattern, full)
		return nil, false
	}
	return info, true
}

// reading says whether a file is open already, further up the stack.
func (r *reader) reading(id fileID) bool {
	for _, fr := range r.stack {
		if fr.file != nil && fr.file.id.same(id) {
			return true
		}
	}
	return false
}

// readFile reads a whole file within the byte budget.
func (r *reader) readFile(name string) ([]byte, error) {
	f, err := r.fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, r.lim.MaxBytes-r.bytesIn+1))
	if err != nil {
		return nil, err
	}
	if r.bytesIn += int64(len(data)); r.bytesIn > r.lim.MaxBytes {
		r.fail(r.pos, "with %s the configuration files are larger than %d bytes together; lbd reads no further", name, r.lim.MaxBytes)
		return nil, nil
	}
	return data, nil
}

// dirOf is the directory keepalived changes into to read a file: dirname(3)
// of its path, "" for none.
func dirOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	if d := strings.TrimRight(p[:i], "/"); d != "" {
		return d
	}
	return "/"
}

// physical returns the next line of the files as keepalived's fgets() with
// its 1024-byte buffer reads it, without its line end; at the end of a file
// it goes on with the next match, then with the including file.
func (r *reader) physical() (string, bool) {
	for len(r.stack) > 0 && !r.fatal {
		top := r.stack[len(r.stack)-1]
		if f := top.file; f != nil {
			if s, ok := r.chunk(f); ok {
				return s, true
			}
			top.file = nil
			r.includeCheck = top.saved
		}
		if !r.openNext(top) {
			r.stack = r.stack[:len(r.stack)-1]
		}
	}
	return "", false
}

// chunk reads the next line of f, or its first lineMax-1 bytes: keepalived
// reads the rest of a longer line as a line of its own.
func (r *reader) chunk(f *fileFrame) (string, bool) {
	if f.off >= len(f.data) {
		return "", false
	}
	rest := f.data[f.off:]
	n := min(len(rest), lineMax-1)
	if i := bytes.IndexByte(rest[:n], '\n'); i >= 0 {
		n = i + 1
	}
	s := string(rest[:n])
	f.off += n
	r.pos = Pos{File: f.name, Line: f.line}
	if !r.count() {
		return "", false
	}
	if strings.HasSuffix(s, "\n") {
		f.line++
	} else if tail, _, _ := bytes.Cut(f.data[f.off:], []byte("\n")); len(bytes.Trim(tail, "\r")) > 0 {
		r.probs.warnf(r.pos, KindLongLine, "line longer than %d bytes: keepalived 2.2.7 reads the rest of it as a line of its own", lineMax-1)
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		r.probs.warnf(r.pos, KindNUL, "a NUL byte: keepalived 2.2.7 ignores the rest of the line")
		s = s[:i]
	}
	return strings.TrimRight(s, "\r\n"), true
}
