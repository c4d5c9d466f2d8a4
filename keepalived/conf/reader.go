package conf

import (
	"math/rand/v2"
	"strings"
)

// reader hands out the lines of a configuration as keepalived 2.2.7's
// read_line() hands them to its keyword parser, as seen by keepalived's
// VRRP and checker processes: they read the copy of the configuration
// that the parent process wrote, de-commented once already.
type reader struct {
	fs       FS
	configID string
	lim      Limits
	probs    *problems
	rand     func() int64

	stack        []*globFrame // includes being read, the innermost last
	files        []string
	includeCheck includeFlags
	pos          Pos // the last line read from a file

	residue    string          // the rest of a line after a brace
	seqs       []*seq          // active ~SEQ and ~LST, the newest last
	defs       map[string]*def // parameters
	mlDef      *def            // the multi-line definition being read
	pending    mlText          // the rest of a multi-line definition being expanded
	mlStack    []mlSaved
	mlSeqDepth int  // sequences below this wait for the multi-line text
	direct     bool // the line is an include written as such in a file

	globBudget        int // file system calls left for includes
	bytesIn, bytesOut int64
	lines, substs     int
	lineSubsts        int
	fatal             bool
}

func newReader(opts Options, probs *problems) *reader {
	r := &reader{
		fs:       opts.FS,
		configID: opts.ConfigID,
		lim:      opts.Limits.withDefaults(),
		probs:    probs,
		rand:     opts.Random,

		globBudget: maxGlobCalls,
	}
	if r.fs == nil {
		r.fs = OSFS{}
	}
	if r.rand == nil {
		rng := rand.New(rand.NewPCG(1, 2))
		r.rand = func() int64 { return rng.Int64N(1 << 31) }
	}
	if opts.AllIncludeChecks {
		r.includeCheck = incAll
	}
	r.defs = r.standardDefs()
	return r
}

// fail stops reading: input beyond lbd's bounds.
func (r *reader) fail(pos Pos, format string, args ...any) {
	r.probs.errorf(pos, KindLimit, format, args...)
	r.fatal = true
}

// count counts a line read or made; false past the bound.
func (r *reader) count() bool {
	if r.lines++; r.lines > r.lim.MaxLines {
		r.fail(r.pos, "more than %d lines, read or made by ~SEQ, ~LST and definitions; lbd reads no further", r.lim.MaxLines)
	}
	return !r.fatal
}

func (r *reader) checkBytesOut() {
	if r.bytesOut > r.lim.MaxBytes && !r.fatal {
		r.fail(r.pos, "the configuration expands to more than %d bytes; lbd reads no further", r.lim.MaxBytes)
	}
}

// next returns the next line for the keyword parser, with the position of
// the file line it came from: comments gone, conditionals applied,
// parameters substituted, sequences expanded, includes followed, and a
// '{' or '}' on a line of its own. ok is false at the end.
func (r *reader) next() (line string, pos Pos, ok bool) {
	for !r.fatal {
		buf, ok := r.fetch()
		if !ok {
			break
		}
		if r.mlDef != nil {
			r.continueDefinition(buf)
			continue
		}
		if buf = r.process(buf); buf == "" || r.include(buf) {
			continue
		}
		line, r.residue = splitBrace(buf)
		r.bytesOut += int64(len(line))
		if r.checkBytesOut(); r.fatal {
			break
		}
		return line, r.pos, true
	}
	r.mlDef = nil // keepalived's is a local of read_line()
	return "", r.pos, false
}

// fetch returns the next text to process: the rest of a line after a
// brace, a sequence's next line, a multi-line definition's next line, or
// the next line of the files, in that order.
func (r *reader) fetch() (string, bool) {
	r.direct = false
	switch {
	case r.residue != "":
		s := r.residue
		r.residue = ""
		return s, r.count()
	case len(r.seqs) > r.mlSeqDepth:
		return r.seqLine(), r.count()
	case r.pending.ok:
		return r.pendingLine(), r.count()
	}
	return r.fileLine()
}

// pendingLine returns the next line of the multi-line definition being
// expanded; after its last one, the outer expansion goes on.
func (r *reader) pendingLine() string {
	line, rest, more := strings.Cut(r.pending.s, "\n")
	switch {
	case more:
		r.pending.s = rest
	case len(r.mlStack) > 0:
		top := r.mlStack[len(r.mlStack)-1]
		r.mlStack = r.mlStack[:len(r.mlStack)-1]
		r.pending, r.mlSeqDepth = top.rest, top.seqDepth
	default:
		r.pending, r.mlSeqDepth = mlText{}, 0
	}
	return line
}

// fileLine returns the next line of the files that is not empty once
// de-commented. keepalived's parent de-comments each line and writes it
// to the copy its other processes read (an include line as a blank one,
// followed by the included files); those de-comment it once more.
func (r *reader) fileLine() (string, bool) {
	for {
		raw, ok := r.physical()
		if !ok {
			return "", false
		}
		copied, open := decomment(raw)
		if open {
			r.probs.errorf(r.pos, KindQuote, msgOpenQuote)
		}
		switch {
		case copied != "" && (copied[0] == '#' || copied[0] == '!'):
			r.probs.errorf(r.pos, KindCopyMarker, "a line starting with an escaped %q: keepalived's VRRP and checker processes take it for a marker of their copy of the configuration", copied[:1])
			continue
		case isInclude(copied) && r.mlDef != nil:
			r.probs.errorf(r.pos, KindIncludeUnclear, "an include inside a multi-line definition: keepalived's processes disagree on it (its VRRP and checker processes end the definition here and include nothing)")
			r.endDefinition()
			continue
		case copied == "":
			if r.mlDef != nil {
				r.endDefinition() // an empty line ends a multi-line definition
			}
			continue
		}
		if isInclude(copied) {
			// The parent process follows it, as it reads it; the others
			// find a blank line and the included files after it.
			r.direct = true
			return copied, true
		}
		line, _ := decomment(copied)
		if line != copied {
			r.probs.warnf(r.pos, KindEscapedComment, "keepalived's VRRP and checker processes read a comment from the escaped '#' or '!' on this line")
		}
		if line != "" {
			return line, true
		}
	}
}

// process applies conditionals, definitions, sequences and substitution
// to a line, as the loop in keepalived's read_line() does; "" when nothing
// is left for the keyword parser.
func (r *reader) process(buf string) string {
	r.lineSubsts = 0
	// n is read_line()'s len: the line's length before substitution,
	// which keepalived 2.2.7 does not update after it.
	n := len(buf)
	for buf != "" && !r.fatal {
		if buf[0] == '@' {
			if buf = r.conditional(buf, &n); buf == "" {
				return ""
			}
		}
		if buf[0] == '$' {
			if d := r.checkDefinition(buf); d != nil {
				if d.multiline {
					r.mlDef = d
				}
				return ""
			}
		}
		if strings.HasPrefix(buf, "~SEQ") || strings.HasPrefix(buf, "~LST") {
			r.addSequence(buf)
			return ""
		}
		if buf[0] == '~' || !strings.Contains(buf, "$") {
			return buf
		}
		out, next, found := r.substitute(buf, lineMax, r.pending)
		if !found {
			return out
		}
		r.pending = next
		var open bool
		if buf, open = decomment(out); open {
			r.probs.errorf(r.pos, KindQuote, msgOpenQuote)
		}
		if buf == "" || buf[0] != '@' && !strings.Contains(buf, "$") {
			return buf
		}
	}
	return buf
}

// conditional applies @id or @^id: the rest of the line when the config
// id matches (does not match, for @^), else "". keepalived 2.2.7 moves
// the rest of the line into place by *n bytes, the length the line had
// before substitution: when a parameter made the '@', that can be short.
func (r *reader) conditional(buf string, n *int) string {
	ofs := 1
	rev := len(buf) > 1 && buf[1] == '^'
	if rev {
		ofs = 2
	}
	sp := strings.IndexAny(buf[ofs:], " \t")
	if sp < 0 || (buf[ofs:ofs+sp] == r.configID) == rev {
		return ""
	}
	start := len(buf) - len(strings.TrimLeft(buf[ofs+sp:], " \t"))
	*n -= start
	move := *n + 1
	if move > len(buf)-start {
		return buf[start:]
	}
	if move >= 0 {
		r.probs.warnf(r.pos, KindSubstitution, "keepalived 2.2.7 garbles this line: a parameter made its '@' conditional longer than the line was")
	}
	switch {
	case move > 0: // the bytes moved, then what was there
		return buf[start:start+move] + buf[move:]
	case move == 0:
		return buf // nothing moved: the '@' stays
	}
	r.probs.errorf(r.pos, KindSubstitution, "keepalived 2.2.7 crashes on this line: a parameter made its '@' conditional longer than the line was")
	return ""
}

// include follows an include line (keepalived's check_include()) and
// says whether buf was one.
func (r *reader) include(buf string) bool {
	if !isInclude(buf) {
		return false
	}
	kind, p := includeFlags(0), 8
	if !isSpace(buf[7]) {
		p = 9
		kind = map[byte]includeFlags{
			'r': incRead, 'a': incAll, 'w': incRead | incMatch | incWildcard,
			'm': incRead | incMatch, 'b': incRead | incBrace,
		}[buf[7]]
	}
	pattern := strings.TrimLeft(buf[p:], " \t")
	if !r.direct {
		r.probs.errorf(r.pos, KindIncludeUnclear, "include %q made by a conditional, a parameter or a sequence: keepalived's parent process reads it here, its VRRP and checker processes read it twice (keepalived.conf(5): write include lines plainly)", pattern)
	}
	r.openGlob(pattern, kind, r.pos)
	return true
}

// setIncludeCheck is keepalived's include_check_set() for
// global_defs { include_check ... }.
func (r *reader) setIncludeCheck(args []string, pos Pos) {
	if len(args) == 0 {
		r.includeCheck = incAll
		return
	}
	names := map[string]includeFlags{"read": incRead, "match": incMatch, "wildcard_match": incWildcard, "brace_match": incBrace}
	for i, w := range args {
		op := byte(0)
		if w != "" && (w[0] == '+' || w[0] == '-') {
			op, w = w[0], w[1:]
		} else if i == 0 {
			r.includeCheck = 0
		} else {
			r.probs.errorf(pos, KindInclude, "include_check %q after the first option needs '+' or '-'; keepalived ignores it", w)
			continue
		}
		flag, ok := names[w]
		if !ok {
			r.probs.errorf(pos, KindInclude, "include_check %q is no option (read, match, wildcard_match, brace_match); keepalived ignores it", w)
			continue
		}
		switch op {
		case '+':
			r.includeCheck |= flag
		case '-':
			r.includeCheck &^= flag
		default:
			r.includeCheck = incRead | flag
		}
	}
}
