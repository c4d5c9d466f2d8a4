// Package conf reads a keepalived configuration the way keepalived 2.2.7
// (Debian 12's package, which patches nothing in its parser) reads it, into
// a tree of statements that each know their file and line, for `lbd import
// keepalived`. It knows no keywords: mapping the tree to lbd's
// configuration is another package's job.
//
// # keepalived-exact
//
// Modelled on keepalived 2.2.7's lib/parser.c (read_line and what it
// calls) and keepalived.conf(5), and on glibc's glob(3) and fnmatch(3);
// checked against `keepalived -t` (TestAgainstKeepalived with
// LBD_KEEPALIVED_BIN set, and a differential run over the fuzz corpus):
//
//   - Which process: keepalived's parent reads the files and writes a
//     de-commented copy; its VRRP and checker processes, which read
//     vrrp_instance and virtual_server, read that copy and de-comment it
//     again. Parse reads as they do: \# and \! are comments after all (a
//     warning says so), and a comment line ends a multi-line definition as
//     an empty line does. Include lines are the parent's: they are read
//     once de-commented and followed where they stand.
//   - Lines: keepalived's 1024-byte buffer (a longer line goes on as a line
//     of its own), a NUL ending a line, CR and LF stripped from line ends.
//   - Comments: '#' or '!' outside double quotes, to the end of the line.
//   - Words: white space (space, tab, CR, LF, VT, FF) separates them; a
//     double-quoted word keeps its spaces and loses its quotes, with no
//     escapes. SplitQuoted splits a script's command line as keepalived does
//     (single quotes, backslash escapes).
//   - Braces: a '{' or '}' outside quotes cuts the line, so that
//     `real_server 192.0.2.1 80 { weight 1 }` on one line and the same over
//     four lines give the same tree; '{' may be on the next line. An
//     undefined ${NAME} outside quotes is cut there too.
//   - Conditional lines: @id and @^id against Options.ConfigID (keepalived's
//     -i; its default, the host name's first label, is DefaultConfigID).
//   - Parameters: $NAME=value, multi-line definitions (a final backslash),
//     $NAME and ${NAME}, recursive replacement at use, undefined names left
//     as written, ${_PWD}, ${_INSTANCE}, ${_RANDOM [min [max]]}, ${_HASH},
//     ${_BANG}, and 2.2.7's own bugs: ${NAME params} not at the end of a
//     line garbles the rest, and an '@' made by a parameter is stripped by
//     the line's length before substitution (warnings say so). ${_ENV} is
//     newer than 2.2.7 and stays as written.
//   - Sequences: ~SEQ(var, [start, [step,]] end) and ~SEQx (hexadecimal),
//     ~LST(var, values...) and ~LST({vars}, {values}...), nested, with C's
//     strtol numbers.
//   - include, includer, includem, includew, includeb, includea: glob
//     patterns with csh braces, relative to the directory of the including
//     file (keepalived changes into it), matches sorted within each brace
//     alternative, hidden files only for a pattern starting with '.',
//     directories and executable files skipped; include_check (in
//     global_defs) and Options.AllIncludeChecks (-e) decide which failures
//     are errors (keepalived then refuses to start). A pattern that matches
//     nothing includes nothing: for a plain include keepalived reads on,
//     and Parse warns.
//
// An Error is what makes `keepalived -t` fail, or something lbd refuses;
// a Warning is what keepalived tolerates.
//
// # Not keepalived-exact
//
//   - Which keywords take a block, and what they mean, is keepalived's
//     keyword tables'; here any line followed by '{' opens a block, and
//     unknown keywords are kept as nodes for the mapping to report.
//   - Where keepalived misreads, crashes or hangs, Parse reports an error
//     instead of imitating it: an include loop (keepalived recurses until
//     it runs out of file descriptors), an include made by a conditional,
//     parameter or sequence, or inside a multi-line definition
//     (keepalived's processes read it differently), a line starting with an
//     escaped '#' or '!' (its processes take it for a marker of their
//     copy), a parameter cycle (keepalived loops forever), a conditional it
//     crashes on, a ~SEQ that would overflow a long (keepalived: undefined).
//   - ${_RANDOM} draws from Options.Random, by default a fixed sequence, so
//     that reading twice gives the same tree; keepalived draws anew at
//     each start.
//   - Positions: keepalived's processes lose count after a long line, a NUL
//     or a last line without a newline; Parse gives the real line. Lines
//     made by ~SEQ, ~LST or a multi-line definition carry the line that
//     made them, as in keepalived.
//   - lbd's bounds (Limits, and on glob work) which keepalived does not
//     have.
//
// keepalived 2.2.7 differs from newer versions here: they reject lines
// longer than 1023 bytes and lines with a NUL, end a comment's scan at its
// start (so a comment ending in a backslash no longer continues a
// definition), fix the stale length of an '@' made by a parameter, the
// ${_RANDOM min max} garbling and its division by zero, add ${_ENV NAME},
// reject ~SEQ without ')', and tolerate unmatched quotes for some keywords.
package conf
