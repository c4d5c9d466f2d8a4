package conf

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// oracleCase is a configuration of unknown top-level keywords: keepalived
// -t names each line it reads ("Unknown keyword 'k1'", with its line), so
// its reading can be compared with Parse's, line by line.
type oracleCase struct {
	name  string
	files map[string]string // keepalived.conf and what it includes
	id    string
	// keepalived's children count lines in their copy, where a long line
	// is two: after one, their line numbers are one too high.
	linesDiffer bool
}

func oracleCases() []oracleCase {
	return []oracleCase{
		{name: "comments and quotes", files: map[string]string{"keepalived.conf": "k1 # c\nk2 ! c\n  \tk3\t\n\"k4 # q\" x\nk5\"a b\"c\nk6 \\# hidden\n\r\nk7\r\n"}},
		{name: "braces", files: map[string]string{"keepalived.conf": "k1 { k2 }\nk3\n{\nk4 }\nk5{k6{k7}}\n"}},
		{name: "conditionals", id: "main", files: map[string]string{"keepalived.conf": "@main k1\n@^main k2\n@other k3\n@^other k4\n@main\n@main @x k5\n"}},
		{name: "parameters", files: map[string]string{"keepalived.conf": "$A=x\nk_$A\nk_${A}y\n$B=$A$A\nk_${B}\nk_$U\n$C=@main\n$C kc\n$D=$E=5\n$D\nk_$E\n$H=k_${_HASH}x\n$H\n\"k_${_HASH}${_BANG}\"\nk_${_INSTANCE}\n"}, id: "main"},
		{name: "multi-line definitions", files: map[string]string{"keepalived.conf": "$M=\\\n  km1_${i} \\\n  km2_${i}\n~SEQ(i,1,2) $M\n$N=\\\nkn1 \\\n# comment\nkn2\n$N\n$O=ko1 \\\n\nko2\n$O\n"}},
		{name: "sequences", files: map[string]string{"keepalived.conf": "~SEQx(h, 9, 11) kh_${h}\n~SEQ(i, 0) ki_$i\n~SEQ(a,1,2) ~SEQ(b,-1,-2) kab_${a}_${b}\n~LST({a,b},{1,2},{3}) kl_${a}_${b}\n~SEQ(j, 08, 9) kj\nkz_$j\n"}},
		{name: "long line", files: map[string]string{"keepalived.conf": "k_" + strings.Repeat("x", 1030) + "\nk2\n"}, linesDiffer: true},
		{name: "conditionals made by parameters", id: "main", files: map[string]string{
			"keepalived.conf": "$C=@main\n$C kc\n$IF_MAIN=@main\n$IF_MAIN kpriority 240\n$X=@main kabcdefghijk\n$X 1234\n$M=@main\n$M 12345\n"}},
		{name: "substitution quirks", files: map[string]string{"keepalived.conf": "k${_RANDOM 5 5}_tail more\n$S=~SEQ(i,1,2) ks${i}\n$S\n" +
			"$A=" + strings.Repeat("a", 600) + "\n${A}${A}\n$M=a \\\nkm2 # c \\\nkm3\n$M\n"}},
		{name: "nested multi-line definitions", files: map[string]string{"keepalived.conf": "$RS= \\\nkrs_${VS}_${RS_NUM} { \\\nkw_${RS_NUM} \\\n}\n" +
			"$VSDEF= \\\nkvs_${VS} { \\\n  $RS_NUM=1 \\\n  $RS \\\n  $RS_NUM=2 \\\n  $RS \\\n}\n~SEQ(VS, 0, 1) $VSDEF\n"}},
		{name: "includes", files: map[string]string{
			"keepalived.conf":  "k0\ninclude conf.d/*.conf\ninclude {b,a}.inc\ninclude {a,none}.inc\ninclude none.conf\ninclude conf.d/[\\!12].conf\nk9\n",
			"conf.d/b.conf":    "kbb\n",
			"conf.d/2.conf":    "k2\ninclude ../sub/x.inc\n",
			"conf.d/1.conf":    "k1 {\n k1a\n}\n",
			"conf.d/.h.conf":   "khidden\n",
			"sub/x.inc":        "kx\n",
			"a.inc":            "ka\n",
			"b.inc":            "kb\n",
			"conf.d/skip.conf": "",
		}},
	}
}

// unknownKeyword is keepalived's report of a line it has no keyword for.
const unknownKeyword = `^\((?:(.*): )?Line (\d+)\) Unknown keyword '(.*)'$`

// TestAgainstKeepalived runs keepalived -t on each oracle case and compares
// what its VRRP and checker processes read with what Parse reads.
func TestAgainstKeepalived(t *testing.T) {
	bin := os.Getenv("LBD_KEEPALIVED_BIN")
	if bin == "" {
		t.Skip("set LBD_KEEPALIVED_BIN to keepalived 2.2.7 (Debian 12's /usr/sbin/keepalived, or extracted as for " +
			"TestDebianSamples: /tmp/kad/usr/sbin/keepalived) to compare Parse with keepalived -t")
	}
	for _, tc := range oracleCases() {
		dir := t.TempDir()
		for name, text := range tc.files {
			if name == "keepalived.conf" {
				text += "\nzz_end\n"
			}
			path := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		main := filepath.Join(dir, "keepalived.conf")
		id := cmpOr(tc.id, "lbd-test")
		theirs := keepalivedReads(t, bin, main, id)
		cfg, _ := Parse(main, Options{ConfigID: id})
		var ours []string
		cfg.Root.Walk(func(n *Node) bool {
			if n.Keyword != "zz_end" {
				ours = append(ours, fmt.Sprintf("%s:%d %s", filepath.Base(n.Pos.File), n.Pos.Line, n.Keyword))
			}
			return true
		})
		if tc.linesDiffer {
			ours, theirs = keywordsOnly(ours), keywordsOnly(theirs)
		}
		if !slices.Equal(ours, theirs) || len(theirs) == 0 {
			t.Errorf("%s:\nkeepalived %q\n       lbd %q", tc.name, theirs, ours)
		}
		t.Logf("%s: %d lines read alike: %.300q", tc.name, len(theirs), theirs)
	}
}

// keepalivedReads returns the unknown keywords, with file and line, that
// keepalived's last process reports, after checking that its child
// processes agree.
func keepalivedReads(t *testing.T, bin, main, id string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "-t", "-l", "-D", "-f", main, "-i", id).CombinedOutput()
	var blocks [][]string
	var cur []string
	re := regexp.MustCompile(unknownKeyword)
	for _, line := range strings.Split(string(out), "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || m[3] == "}" {
			continue
		}
		if m[3] == "zz_end" {
			blocks, cur = append(blocks, cur), nil
			continue
		}
		cur = append(cur, fmt.Sprintf("%s:%s %s", filepath.Base(cmpOr(m[1], main)), m[2], m[3]))
	}
	if len(blocks) < 2 {
		t.Fatalf("keepalived -t did not read %s through (%d processes):\n%s", main, len(blocks), out)
	}
	for _, b := range blocks[2:] {
		if !slices.Equal(b, blocks[1]) {
			t.Errorf("keepalived's processes differ:\n%q\n%q", blocks[1], b)
		}
	}
	return blocks[len(blocks)-1]
}

func keywordsOnly(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		_, out[i], _ = strings.Cut(s, " ")
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestSeverityAgainstKeepalived checks that Parse returns an error exactly
// when keepalived -t fails (exit status not 0), for configurations of
// keywords keepalived knows.
func TestSeverityAgainstKeepalived(t *testing.T) {
	bin := os.Getenv("LBD_KEEPALIVED_BIN")
	if bin == "" {
		t.Skip("set LBD_KEEPALIVED_BIN (see TestAgainstKeepalived)")
	}
	const base = "global_defs {\n router_id x\n}\n"
	for _, text := range []string{
		base,
		"global_defs {\n router_id \"x\n}\n",
		"include none.conf\n" + base,
		"include none/*.conf\n" + base,
		"includea none.conf\n" + base,
		"includer none.conf\n" + base,
		"global_defs {\n include_check\n}\ninclude none.conf\n",
		"global_defs {\n router_id x\\#y\n}\n",
		base + "}\n",
		base + "{\n}\n",
		"global_defs {\n router_id x\n",
		"~SEQ(i,1,0,3) x\n" + base,
		"~SEQ(i,1,2)\n" + base,
		"$C=@main\n$C x\n" + base,
		"$R=router_id y\nglobal_defs {\n $R\n}\n",
	} {
		dir := t.TempDir()
		main := filepath.Join(dir, "keepalived.conf")
		if err := os.WriteFile(main, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, runErr := exec.CommandContext(ctx, bin, "-t", "-l", "-D", "-f", main, "-i", "main").CombinedOutput()
		cancel()
		_, err := Parse(main, Options{ConfigID: "main"})
		if (err != nil) != (runErr != nil) {
			t.Errorf("%q: Parse: %v; keepalived -t: %v\n%s", text, err, runErr, out)
		}
	}
}
