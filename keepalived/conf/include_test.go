package conf

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

// On disk: includes are relative to the including file's directory, globs
// are sorted, brace alternatives keep their order, nodes name their file.
func TestIncludeOnDisk(t *testing.T) {
	cfg, err := Parse("testdata/include/keepalived.conf", Options{ConfigID: "lb1"})
	if err != nil {
		t.Fatal(err)
	}
	const d = "testdata/include/"
	wantFiles := []string{d + "keepalived.conf", d + "conf.d/10-vrrp.conf", d + "conf.d/../common/peers.conf",
		d + "conf.d/20-script.conf", d + "vs/web.conf", d + "vs/dns.conf"}
	if !slices.Equal(cfg.Files, wantFiles) {
		t.Errorf("files\n got %q\nwant %q", cfg.Files, wantFiles)
	}
	pwd, err := filepath.EvalSymlinks(d + "conf.d")
	if err != nil {
		t.Fatal(err)
	}
	pwd, _ = filepath.Abs(pwd)
	want := "global_defs { router_id lb1 }; " +
		"vrrp_instance VI_1 { state MASTER; interface eth0; virtual_router_id 51; priority 100; virtual_ipaddress { 192.0.2.10/32 }; unicast_peer { 198.18.0.2 } }; " +
		`vrrp_script chk { script "` + pwd + `/check.sh web" }; ` +
		"virtual_server 192.0.2.10 80 { lb_algo rr; real_server 198.18.1.1 80 { weight 1 } }; virtual_server 192.0.2.10 53 { protocol UDP }"
	if got := render(cfg.Root.Children); got != want {
		t.Errorf("tree\n got %s\nwant %s", got, want)
	}
	peer := cfg.Root.Child("vrrp_instance").Child("unicast_peer")
	if peer == nil || peer.Pos != (Pos{d + "conf.d/../common/peers.conf", 1}) || peer.Children[0].Pos.Line != 2 {
		t.Errorf("unicast_peer at %+v", peer)
	}
}

// includeCase parses files (main is etc/keepalived/keepalived.conf).
type includeCase struct {
	name     string
	files    map[string]string
	opts     Options
	want     string
	problems []string
}

func runIncludeCases(t *testing.T, cases []includeCase) {
	t.Helper()
	for _, tc := range cases {
		cfg, err := parseFiles(t, tc.files, tc.opts)
		if got := render(cfg.Root.Children); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if got := problemList(cfg, err); !slices.Equal(got, tc.problems) {
			t.Errorf("%s: problems %q, want %q (%v, %v)", tc.name, got, tc.problems, err, cfg.Warnings)
		}
	}
}

func withMain(main string, more ...string) map[string]string {
	files := map[string]string{"etc/keepalived/keepalived.conf": main}
	for i := 0; i+1 < len(more); i += 2 {
		files[more[i]] = more[i+1]
	}
	return files
}

func TestIncludeGlobs(t *testing.T) {
	confd := []string{"etc/keepalived/conf.d/b.conf", "b", "etc/keepalived/conf.d/a.conf", "a",
		"etc/keepalived/conf.d/10.conf", "ten", "etc/keepalived/conf.d/.hidden.conf", "hidden",
		"etc/keepalived/conf.d/x.txt", "txt"}
	runIncludeCases(t, []includeCase{
		{name: "sorted bytewise, hidden files left out", files: withMain("include conf.d/*.conf", confd...), want: "ten; a; b"},
		{name: "hidden files for a leading '.'", files: withMain("include conf.d/.*", confd...), want: "hidden",
			problems: []string{"1 include warning", "1 include warning"}}, // "." and ".." are directories
		{name: "brace alternatives in their order", files: withMain("include conf.d/{b,a,x}.{conf,txt}", confd...), want: "b; a; txt",
			problems: []string{"1 include warning"}},
		{name: "brackets and ?", files: withMain("include conf.d/[^ab].txt\ninclude conf.d/[a-b].conf\ninclude conf.d/?.conf", confd...),
			want: "txt; a; b; a; b"},
		// '!' starts a comment, also in a pattern; escaped it is a '!'.
		{name: "[!...]", files: withMain("include conf.d/[!ab].txt\ninclude conf.d/[\\!ab].txt", confd...), want: "txt",
			problems: []string{"1 include warning"}},
		{name: "a pattern with a space in it", files: withMain("include conf.d/[!ab].txt conf.d/[a-b].conf", confd...), want: "",
			problems: []string{"1 include warning"}},
		{name: "absolute", files: withMain("include /etc/keepalived/conf.d/a.conf", confd...), want: "a"},
		{name: "twice", files: withMain("include conf.d/{a,a}.conf", confd...), want: "a; a"},
		{name: "directories are skipped", files: withMain("include conf.d", confd...), want: "",
			problems: []string{"1 include warning"}},
		{name: "in a block", files: withMain("vs {\n include conf.d/a.conf\n}", confd...), want: "vs { a }"},
		{name: "quotes are part of the pattern", files: withMain(`include "conf.d/a.conf"`, confd...), want: "",
			problems: []string{"1 include warning"}},
		{name: "a file without its last newline, then the includer goes on", files: withMain("include conf.d/a.conf\nz", confd...), want: "a; z"},
		{name: "the file's own directory", files: withMain("include conf.d/a.conf",
			"etc/keepalived/conf.d/a.conf", "include sub/b.conf\ninclude ../c.conf", "etc/keepalived/conf.d/sub/b.conf", "b",
			"etc/keepalived/c.conf", "c"), want: "b; c"},
	})
}

func TestIncludeFailures(t *testing.T) {
	exec := fstest.MapFS{
		"etc/keepalived/keepalived.conf": {Data: []byte("include a.conf\nincluder a.conf\ninclude b.conf")},
		"etc/keepalived/a.conf":          {Data: []byte("a"), Mode: 0o755},
		"etc/keepalived/b.conf":          {Data: []byte("b"), Mode: 0o640},
	}
	cfg, err := parseMap(exec, Options{})
	if got, want := problemList(cfg, err), []string{"2 include error", "1 include warning"}; render(cfg.Root.Children) != "b" || !slices.Equal(got, want) {
		t.Errorf("executable files: tree %s, problems %q, want b and %q", render(cfg.Root.Children), got, want)
	}
	runIncludeCases(t, []includeCase{
		{name: "plain include: keepalived reads on", files: withMain("include none.conf\ninclude conf.d/*.conf\ninclude {a,b}.conf\nx 1"),
			want: "x 1", problems: []string{"1 include warning", "2 include warning", "3 include warning"}},
		{name: "includea: errors", files: withMain("includea none.conf\nincludea conf.d/*.conf\nx 1"),
			want: "x 1", problems: []string{"1 include error", "2 include error"}},
		{name: "includem: missing name", files: withMain("includem none.conf\nincludem /etc/*.none\nx 1"),
			want: "x 1", problems: []string{"1 include error", "2 include warning"}},
		{name: "includew: no match for a wildcard", files: withMain("includew /etc/*.none"),
			want: "", problems: []string{"1 include error"}},
		{name: "some alternatives missing", files: withMain("include {a,none}.conf", "etc/keepalived/a.conf", "a"),
			want: "a", problems: []string{"1 include warning"}},
		{name: "includeb: then nothing", files: withMain("includeb {a,none}.conf", "etc/keepalived/a.conf", "a"),
			want: "", problems: []string{"1 include error"}},
		{name: "-e", files: withMain("include none.conf"), opts: Options{AllIncludeChecks: true},
			want: "", problems: []string{"1 include error"}},
		{name: "include_check in global_defs rules what follows", files: withMain("include none1.conf\nglobal_defs {\n include_check match\n}\ninclude none2.conf\ninclude /etc/*.none"),
			want: "global_defs { include_check match }", problems: []string{"5 include error", "1 include warning", "6 include warning"}},
		{name: "include_check +/-", files: withMain("global_defs {\n include_check +wildcard_match -match bogus\n}\ninclude none.conf\ninclude /etc/*.none"),
			want: "global_defs { include_check +wildcard_match -match bogus }", problems: []string{"2 include error", "5 include error", "4 include warning"}},
		{name: "include_check is restored after the file that sets it", files: withMain("include a.conf\ninclude none.conf",
			"etc/keepalived/a.conf", "global_defs {\ninclude_check\n}\ninclude none2.conf"),
			want: "global_defs { include_check }", problems: []string{"4 include error", "2 include warning"}},
	})
}

func TestIncludeRefusals(t *testing.T) {
	chain := withMain("include 1.conf")
	for i := 1; i < 20; i++ {
		chain["etc/keepalived/"+strconv.Itoa(i)+".conf"] = "include " + strconv.Itoa(i+1) + ".conf\nf" + strconv.Itoa(i)
	}
	runIncludeCases(t, []includeCase{
		{name: "a file including itself", files: withMain("a 1\ninclude keepalived.conf\nb 2"), want: "a 1; b 2",
			problems: []string{"2 include-loop error"}},
		{name: "a loop through another file", files: withMain("include a.conf\nm", "etc/keepalived/a.conf", "x\ninclude /etc/keepalived/*.conf\ny"),
			want: "x; y; m", problems: []string{"2 include-loop error", "2 include-loop error"}},
		{name: "too deep", files: chain, opts: Options{Limits: Limits{MaxIncludeDepth: 3}},
			want: "f2; f1", problems: []string{"1 limit error"}},
		{name: "made by a conditional", files: withMain("@main include a.conf", "etc/keepalived/a.conf", "a"), want: "a",
			problems: []string{"1 include-unclear error"}},
		{name: "made by a parameter", files: withMain("$I=include a.conf\n$I", "etc/keepalived/a.conf", "a"), want: "a",
			problems: []string{"2 include-unclear error"}},
		{name: "after a brace", files: withMain("x { } include a.conf", "etc/keepalived/a.conf", "a"), want: "x { }; a",
			problems: []string{"1 include-unclear error"}},
		{name: "written plainly with a parameter is fine", files: withMain("$D=a\ninclude ${D}.conf", "etc/keepalived/a.conf", "a"), want: "a"},
	})
}

func TestTopFile(t *testing.T) {
	cfg, err := Parse("/nonexistent/keepalived.conf", Options{ConfigID: "x", FS: MapFS(fstest.MapFS{})})
	if err == nil || cfg == nil || len(cfg.Files) != 0 || !strings.Contains(err.Error(), "/nonexistent/keepalived.conf") {
		t.Errorf("missing file: %v, %+v", err, cfg)
	}
	m := fstest.MapFS{"a.conf": {Data: []byte("a")}, "b.conf": {Data: []byte("b")}}
	cfg, err = Parse("/*.conf", Options{ConfigID: "x", FS: MapFS(m)})
	if render(cfg.Root.Children) != "a; b" || err == nil {
		t.Errorf("a pattern matching two files: %s, %v (keepalived reads both, -t reports it)", render(cfg.Root.Children), err)
	}
}

// On disk, a symbolic link to a file being read is a loop, and the
// execute bit makes keepalived skip a file.
func TestIncludeOnDiskLinksAndModes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("keepalived.conf", "include a.conf\ninclude x.conf\nm", 0o644)
	write("a.conf", "a\ninclude link.conf", 0o644)
	write("x.conf", "x", 0o700)
	if err := os.Symlink("keepalived.conf", filepath.Join(dir, "link.conf")); err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(filepath.Join(dir, "keepalived.conf"), Options{ConfigID: "x"})
	want := []string{"2 include-loop error", "2 include warning"}
	if got := problemList(cfg, err); render(cfg.Root.Children) != "a; m" || !slices.Equal(got, want) {
		t.Errorf("tree %s, problems %q; want a; m and %q", render(cfg.Root.Children), got, want)
	}
}
