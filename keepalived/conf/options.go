package conf

import (
	"fmt"
	"os"
	"strings"
)

// Options are what keepalived takes from its command line, and lbd's bounds.
type Options struct {
	// ConfigID selects conditional lines (@id, @^id), as keepalived's
	// -i/--config-id does; empty means DefaultConfigID, keepalived's default.
	ConfigID string
	// AllIncludeChecks makes every include failure an error, as keepalived's
	// -e/--all-config does (include_check with no options).
	AllIncludeChecks bool
	// FS is where files are read; nil is the machine's file system.
	FS FS
	// Random stands for random(3) in ${_RANDOM}: a value in [0, 2^31). nil
	// draws from a fixed sequence, so that reading a configuration twice
	// gives the same result (keepalived draws anew at each start).
	Random func() int64
	// Limits bound the work of one Parse; zero fields take the defaults.
	Limits Limits
}

// Limits bound what hostile or broken input can cost. keepalived has none
// of them: it recurses into include loops until it runs out of file
// descriptors, and expands ~SEQ and $NAME cycles for as long as asked.
type Limits struct {
	// MaxIncludeDepth is how deep includes may nest (default 16).
	MaxIncludeDepth int
	// MaxBytes bounds both the bytes read from files and the text of the
	// lines after expansion (default 64 MiB).
	MaxBytes int64
	// MaxLines bounds the lines read and made by ~SEQ, ~LST and multi-line
	// definitions (default 262,144: a tree of that many lines takes about
	// 100 MiB).
	MaxLines int
	// MaxDepth bounds how deep blocks nest (default 32; keepalived's
	// deepest keyword tables are 4 levels).
	MaxDepth int
	// MaxSubstitutions bounds the $NAME replacements made in all (default
	// 2,000,000); each costs up to a line's 1 KiB. (A line alone may take
	// 10,000: more is a cycle such as $A=$B, $B=$A, on which keepalived
	// loops forever.)
	MaxSubstitutions int
}

// The bounds a zero Limits stands for.
const (
	DefaultMaxIncludeDepth  = 16
	DefaultMaxBytes         = 64 << 20
	DefaultMaxLines         = 1 << 18
	DefaultMaxDepth         = 32
	DefaultMaxSubstitutions = 2_000_000
)

func (l Limits) withDefaults() Limits {
	d := Limits{
		MaxIncludeDepth:  DefaultMaxIncludeDepth,
		MaxBytes:         DefaultMaxBytes,
		MaxLines:         DefaultMaxLines,
		MaxDepth:         DefaultMaxDepth,
		MaxSubstitutions: DefaultMaxSubstitutions,
	}
	if l.MaxIncludeDepth > 0 {
		d.MaxIncludeDepth = l.MaxIncludeDepth
	}
	if l.MaxBytes > 0 {
		d.MaxBytes = l.MaxBytes
	}
	if l.MaxLines > 0 {
		d.MaxLines = l.MaxLines
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	if l.MaxSubstitutions > 0 {
		d.MaxSubstitutions = l.MaxSubstitutions
	}
	return d
}

// DefaultConfigID is keepalived's default config id: the host name up to
// its first dot (uname's node name; keepalived/core/main.c).
func DefaultConfigID() (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("keepalived config id from the host name: %w", err)
	}
	id, _, _ := strings.Cut(h, ".")
	return id, nil
}
