package conf

import "strings"

// maxLineSubstitutions is where substitution for one line is a cycle: a
// 1023-byte line holds some 340 uses, each a chain of definitions at most.
const maxLineSubstitutions = 10_000

// substitute replaces the parameters used in buf, as keepalived's
// replace_param() does: each replacement is scanned again from where it
// starts (so values may use other parameters), an undefined $NAME stays as
// written, a value starting with '~' ends the scan, and a multi-line
// definition gives its first line here and the rest in next. ml is the
// multi-line text being expanded, if any. found says that something was
// replaced; when the line would outgrow keepalived's buffer of maxLen
// bytes, keepalived stops there and so does substitute (found false, the
// line as far as it got).
func (r *reader) substitute(buf string, maxLen int, ml mlText) (out string, next mlText, found bool) {
	next, cur := ml, 0
	for !r.fatal {
		k := strings.IndexByte(buf[cur:], '$')
		if k < 0 || cur+k+1 >= len(buf) {
			break
		}
		cur += k
		u, ok := r.findUse(buf, cur)
		if !ok {
			cur++
			continue
		}
		r.substs++
		if r.lineSubsts++; r.lineSubsts > maxLineSubstitutions {
			r.fail(r.pos, "more than %d substitutions for one line: its parameters refer to each other in a circle, and keepalived 2.2.7 loops forever on it", maxLineSubstitutions)
			return buf, ml, false
		}
		if r.substs > r.lim.MaxSubstitutions {
			r.fail(r.pos, "more than %d substitutions; lbd reads no further", r.lim.MaxSubstitutions)
			return buf, ml, false
		}
		found = true
		var repl string
		repl, next, ml = r.valueOf(u, ml)
		if len(buf)+len(repl)-u.span >= maxLen {
			r.probs.warnf(r.pos, KindSubstitution, "substituting %q makes the line longer than keepalived's %d bytes: it stops substituting there", buf[cur:cur+u.span], maxLen-1)
			return buf, ml, false
		}
		buf = r.splice(buf, cur, u, repl)
		if v := strings.TrimLeft(u.d.value, " \t"); v != "" && v[0] == '~' {
			break
		}
	}
	if !found {
		return buf, ml, false
	}
	return buf, next, true
}

// valueOf is the text a use is replaced by. For a multi-line definition it
// is the first line, the rest becomes the text to read next, and the outer
// multi-line text ml, if any, is set aside until then.
func (r *reader) valueOf(u use, ml mlText) (repl string, next, newML mlText) {
	d := u.d
	if d.fn != nil {
		d.value = d.fn(u.params)
	}
	if !d.multiline {
		return d.value, ml, ml
	}
	if ml.ok {
		r.mlStack = append(r.mlStack, mlSaved{ml, r.mlSeqDepth})
	}
	r.mlSeqDepth = len(r.seqs)
	first, rest, ok := strings.Cut(d.value, "\n")
	if !ok {
		// Only a ~SEQ or ~LST variable named like a multi-line
		// definition gets here.
		r.probs.errorf(r.pos, KindSubstitution, "keepalived 2.2.7 reads past the end of this parameter's value (a ~SEQ or ~LST variable that was a multi-line definition): what it reads is undefined")
		return first, mlText{}, mlText{}
	}
	next = mlText{rest, true}
	return first, next, next
}

// splice puts repl in place of the use at buf[cur:]. keepalived 2.2.7 gets
// one case wrong: a value shorter than a use with parameters (${_RANDOM 1
// 10}) moves only one byte of the rest of the line, which then reads on
// with the use's own text.
func (r *reader) splice(buf string, cur int, u use, repl string) string {
	after := cur + u.span
	if u.params == "" || len(repl) >= u.span || after == len(buf) {
		return buf[:cur] + repl + buf[after:]
	}
	r.probs.warnf(r.pos, KindSubstitution, "keepalived 2.2.7 garbles the rest of a line after a ${NAME ...} use that is not at its end")
	tail := ""
	if cur+len(repl)+1 < len(buf) {
		tail = buf[cur+len(repl)+1:]
	}
	return buf[:cur] + repl + buf[after:after+1] + tail
}
