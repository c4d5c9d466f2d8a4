package importer

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/keepalived/conf"
)

// corpusCase is what one file of testdata/corpus must give.
type corpusCase struct {
	file string
	// errLines are the lines the parser must refuse (file:line in each
	// error); none means the file parses.
	errLines []int
	complete bool
	services int
	vrrp     int // [[vrrp]] tables
	// items are "line: keyword: kind" of every report item that leaves the
	// import incomplete (not mapped, ignored).
	items []string
}

var corpusCases = []corpusCase{
	{file: "nat-tcp-check.conf", complete: true, services: 1},
	{file: "dr-persistence.conf", complete: true, services: 1},
	{file: "tun-ipip.conf", complete: true, services: 1},
	{file: "tun-gue.conf", complete: true, services: 1},
	{file: "fwmark.conf", complete: true, services: 1},
	{file: "group-range.conf", complete: true, services: 2},
	{file: "sh-flags.conf", complete: true, services: 1},
	{file: "ipv6-nat.conf", complete: true, services: 1},
	{file: "persistence-netmask.conf", services: 1, items: []string{
		"9: persistence_granularity 255.255.255.0: not mapped",
		"23: real_server 198.18.3.12 443: not mapped",
		"25: SMTP_CHECK: not mapped",
	}},
	{file: "vrrp-v2-pair.conf", complete: true, vrrp: 2},
	{file: "vrrp-v3.conf", complete: true, vrrp: 2},
	{file: "malformed-unclosed.conf", errLines: []int{2}},
	{file: "malformed-braces.conf", errLines: []int{6, 7, 9}},
}

// TestCorpus imports every configuration of lbd's own keepalived corpus
// (DR, TUN, firewall marks, groups with ranges, IPv6, VRRP v2 and v3,
// malformed input): the malformed ones fail with their lines, the others
// import without panic into TOML lbd accepts, complete or with exactly the
// items listed.
func TestCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "corpus")
	files, err := filepath.Glob(filepath.Join(dir, "*.conf"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range corpusCases {
		names = append(names, c.file)
	}
	for _, f := range files {
		if !slices.Contains(names, filepath.Base(f)) {
			t.Errorf("%s has no case in corpusCases", f)
		}
	}
	var complete, partial, refused int
	for _, c := range corpusCases {
		t.Run(c.file, func(t *testing.T) {
			res, ok := importCorpusFile(t, filepath.Join(dir, c.file), c.errLines)
			switch {
			case !ok:
				refused++
				return
			case res.Report.Complete():
				complete++
			default:
				partial++
			}
			checkCorpusResult(t, c, res)
		})
	}
	t.Logf("own corpus: %d files: %d complete, %d partial, %d refused by the parser", len(corpusCases), complete, partial, refused)
}

// importCorpusFile parses and imports path; with errLines it checks the
// parser's errors instead and reports ok = false.
func importCorpusFile(t *testing.T, path string, errLines []int) (Result, bool) {
	t.Helper()
	cfg, err := conf.Parse(path, conf.Options{ConfigID: "lbd-test"})
	if len(errLines) > 0 {
		checkParseErrors(t, path, err, errLines)
		return Result{}, false
	}
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	res, err := Import(cfg, Options{})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if _, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(res.TOML())}); err != nil {
		t.Fatalf("output does not validate: %v\n%s", err, res.TOML())
	}
	again, err := Import(cfg, Options{})
	if err != nil || again.TOML() != res.TOML() {
		t.Errorf("a second import gives other bytes (%v)", err)
	}
	return res, true
}

// checkParseErrors wants one error at each of lines, each naming
// file:line.
func checkParseErrors(t *testing.T, path string, err error, lines []int) {
	t.Helper()
	var list conf.ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want parser errors at lines %v, got %v", lines, err)
	}
	var got []int
	for _, p := range list {
		got = append(got, p.Pos.Line)
		if !strings.HasPrefix(p.Error(), p.Pos.String()+": ") || !strings.HasSuffix(p.Pos.File, filepath.Base(path)) {
			t.Errorf("error without its file:line: %q", p.Error())
		}
	}
	if !slices.Equal(got, lines) {
		t.Errorf("errors at lines %v, want %v:\n%v", got, lines, err)
	}
	t.Logf("refused as expected: %v", err)
}

func checkCorpusResult(t *testing.T, c corpusCase, res Result) {
	t.Helper()
	rep := res.Report
	if rep.Complete() != c.complete {
		t.Errorf("complete = %v, want %v", rep.Complete(), c.complete)
	}
	if len(res.Services) != c.services {
		t.Errorf("%d services, want %d", len(res.Services), c.services)
	}
	if n := countLines(res.TOML(), "[[vrrp]]"); n != c.vrrp {
		t.Errorf("%d [[vrrp]] tables, want %d:\n%s", n, c.vrrp, res.TOML())
	}
	var got []string
	for _, it := range rep.Items {
		if it.Kind.Incomplete() {
			got = append(got, itemKey(it))
		}
	}
	if !slices.Equal(got, c.items) {
		t.Errorf("incomplete items:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.items, "\n  "))
	}
	for _, it := range rep.Items {
		t.Logf("  %s", it)
	}
	t.Logf("%d services, %d not mapped, %d ignored, %d differ, %d not needed", len(res.Services),
		rep.Count(NotMapped), rep.Count(Ignored), rep.Count(Differs), rep.Count(Unneeded))
}

// itemKey is an item as corpusCase.items lists it.
func itemKey(it Item) string {
	return strconv.Itoa(it.Pos.Line) + ": " + it.Keyword + ": " + it.Kind.String()
}

// countLines counts the lines of text that are line.
func countLines(text, line string) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if l == line {
			n++
		}
	}
	return n
}
