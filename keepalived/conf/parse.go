package conf

// Parse reads the keepalived configuration at path, and the files it
// includes, as keepalived 2.2.7 reads it (see the package comment). path is
// a glob pattern, as keepalived's -f is; relative paths start from lbd's
// working directory.
//
// Parse always returns the Config, as far as it could read it; the error,
// if any, is an ErrorList of every error found (see Severity), each with
// its file and line, or, with no ConfigID, why the host name is unknown.
func Parse(path string, opts Options) (*Config, error) {
	if opts.ConfigID == "" {
		id, err := DefaultConfigID()
		if err != nil {
			return &Config{Root: Node{Pos: Pos{File: path}}}, err
		}
		opts.ConfigID = id
	}
	probs := &problems{}
	r := newReader(opts, probs)
	top := Pos{File: path}
	r.pos = top
	root := Node{Pos: top, Block: true}
	r.openGlob(path, incRead|incMatch|incWildcard, top)
	if len(r.files) == 0 && !r.fatal {
		probs.errorf(top, KindInclude, "cannot read the configuration: keepalived would not start")
	} else {
		b := builder{r: r, stack: []*Node{&root}}
		b.run()
	}
	warns, err := probs.finish()
	return &Config{Root: root, Files: r.files, Warnings: warns}, err
}

// builder makes the tree from the reader's lines. Which keywords take a
// block is keepalived's keyword tables' business; here any line directly
// followed by '{' opens one, and the mapping checks what it finds.
type builder struct {
	r     *reader
	stack []*Node // the open blocks, the root first
	last  *Node   // the line just read, which a '{' would open
	stray int     // '{' that opened nothing: their '}' close nothing
}

func (b *builder) run() {
	for !b.r.fatal {
		line, pos, ok := b.r.next()
		if !ok {
			break
		}
		switch line {
		case "{":
			b.open(pos)
		case "}":
			b.close(pos)
		default:
			b.statement(line, pos)
		}
	}
	if b.r.fatal || len(b.stack) == 1 {
		return
	}
	outer := b.stack[1]
	b.r.probs.errorf(outer.Pos, KindBrace, "the block of %q is not closed (%d '}' missing at the end of the input); keepalived reports it", outer.Keyword, len(b.stack)-1)
}

func (b *builder) open(pos Pos) {
	if b.last == nil {
		b.r.probs.errorf(pos, KindBrace, "'{' that follows no keyword line; keepalived ignores it and reports it")
		b.stray++
		return
	}
	if len(b.stack) > b.r.lim.MaxDepth {
		b.r.fail(pos, "blocks nest deeper than %d; lbd reads no further", b.r.lim.MaxDepth)
		return
	}
	b.last.Block = true
	b.stack = append(b.stack, b.last)
	b.last = nil
}

func (b *builder) close(pos Pos) {
	b.last = nil
	switch {
	case b.stray > 0:
		b.stray--
	case len(b.stack) == 1:
		b.r.probs.errorf(pos, KindBrace, "'}' that closes no block; keepalived reports an extra '}'")
	default:
		b.stack = b.stack[:len(b.stack)-1]
	}
}

func (b *builder) statement(line string, pos Pos) {
	b.last = nil
	words, open := splitWords(line)
	if open {
		b.r.probs.errorf(pos, KindQuote, msgOpenQuote)
	}
	if len(words) == 0 {
		return
	}
	n := Node{Keyword: words[0], Raw: line, Pos: pos}
	if len(words) > 1 {
		n.Args = words[1:]
	}
	parent := b.stack[len(b.stack)-1]
	parent.Children = append(parent.Children, n)
	b.last = &parent.Children[len(parent.Children)-1]
	// keepalived applies include_check as it reads it: it governs the
	// includes that follow.
	if n.Keyword == "include_check" && len(b.stack) == 2 && parent.Keyword == "global_defs" {
		b.r.setIncludeCheck(n.Args, pos)
	}
}
