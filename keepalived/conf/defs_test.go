package conf

import (
	"slices"
	"strings"
	"testing"
)

type treeCase struct {
	name, text string
	id         string   // config id; "" is "main"
	want       string   // rendered tree
	problems   []string // "line kind severity", errors then warnings
}

func runTreeCases(t *testing.T, cases []treeCase) {
	t.Helper()
	for _, tc := range cases {
		cfg, err := parseFiles(t, map[string]string{"etc/keepalived/keepalived.conf": tc.text},
			Options{ConfigID: tc.id, Random: func() int64 { return 12345 }})
		if got := render(cfg.Root.Children); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		if got := problemList(cfg, err); !slices.Equal(got, tc.problems) {
			t.Errorf("%s: problems %q, want %q (%v, %v)", tc.name, got, tc.problems, err, cfg.Warnings)
		}
	}
}

func TestParameters(t *testing.T) {
	runTreeCases(t, []treeCase{
		{name: "plain use", text: "$ADDR=10.0.0.1\nreal_server $ADDR 80", want: "real_server 10.0.0.1 80"},
		{name: "braces need no space after", text: "$P=80\nx 1.2.3.4:${P} 1.2.3.4:$Pz", want: "x 1.2.3.4:80 1.2.3.4:$Pz"},
		{name: "before , and )", text: "$A=1\nx ($A,$A)", want: "x (1,1)"},
		{name: "undefined stays", text: "notify \"/bin/x $HOME ${HOME}\" $", want: `notify "/bin/x $HOME ${HOME}" $`},
		{name: "space before = is no definition", text: "$X = 1", want: "$X = 1"},
		{name: "empty value", text: "$E=\nx a${E}b", want: "x ab"},
		{name: "redefined", text: "$V=1\nx $V\n$V=2\nx $V", want: "x 1; x 2"},
		{name: "replaced at use, recursively (keepalived.conf(5))",
			text: "$ADDRESS_BASE=10.2.${ADDRESS_BASE_SUB}\n$ADDRESS_BASE_SUB=0\n${ADDRESS_BASE}.100/32\n$ADDRESS_BASE_SUB=10\n${ADDRESS_BASE}.100/32",
			want: "10.2.0.100/32; 10.2.10.100/32"},
		{name: "conditional definitions", text: "@main $PRIORITY=240\n@backup $PRIORITY=200\npriority $PRIORITY", want: "priority 240"},
		{name: "conditional made by a parameter", text: "$IF_MAIN=@main\n$IF_MAIN priority 240\n$IF_B=@backup\n$IF_B priority 1", want: "priority 240"},
		// keepalived 2.2.7 then moves the rest of the line by the length the
		// line had before substitution (checked against keepalived -t).
		{name: "a made '@' on a short line moves too little", text: "$X=@main kabcdefghijk\n$X 1234\n$M=@main\n$M 12345",
			want: "kaain kabcdefghijk 1234; 123in 12345", problems: []string{"2 substitution warning", "4 substitution warning"}},
		{name: "or nothing", text: "$C=@main\n$C kc", want: "@main kc", problems: []string{"2 substitution warning"}},
		{name: "or crashes keepalived", text: "$C=@main\n$C k\nz", want: "z", problems: []string{"2 substitution error"}},
		{name: "definition made by a parameter", text: "$D=$E=5\n$D\nx $E", want: "x 5"},
		{name: "a value starting with ~ ends the scan", text: "$S=~SEQ(i,1,2) y${i}\n$S", want: "y1; y2"},
		{name: "comment characters from parameters", text: "$_HASH=H\nx ${_HASH} \"${_BANG}\"", want: "x H !"},
		{name: "${_HASH} outside quotes starts a comment in 2.2.7", text: "x a${_HASH}b \"c${_HASH}d\"", want: "x a"},
		{name: "${_HASH} inside quotes", text: "x \"c${_HASH}d\" ${_BANG}", want: "x c#d"},
		{name: "${_INSTANCE}", text: "router_id r-${_INSTANCE}", id: "lb2", want: "router_id r-lb2"},
		{name: "${_PWD}", text: "script ${_PWD}/check.sh", want: "script /etc/keepalived/check.sh"},
		{name: "cycle", text: "$A=$B\n$B=$A\nx $A\ny 1", want: "",
			problems: []string{"3 limit error"}},
		{name: "too long for keepalived's buffer", text: "$A=" + strings.Repeat("a", 600) + "\nx $A $A",
			want: "x " + strings.Repeat("a", 600) + " $A", problems: []string{"2 substitution warning"}},
	})
}

func TestRandom(t *testing.T) {
	runTreeCases(t, []treeCase{
		{name: "default range", text: "x ${_RANDOM}", want: "x 12345",
			problems: []string{"1 substitution warning"}},
		{name: "range", text: "x ${_RANDOM 1 10}", want: "x 6",
			problems: []string{"1 substitution warning"}},
		{name: "min only", text: "x ${_RANDOM 20000}", want: "x 32345",
			problems: []string{"1 substitution warning"}},
		{name: "min above max: C's unsigned arithmetic, cut to max's digits", text: "x ${_RANDOM 10 5}", want: "x 1",
			problems: []string{"1 substitution warning"}},
		{name: "2.2.7 garbles what follows a ${NAME params} use", text: "a {\nx ${_RANDOM 1 10} y\n",
			want: "a { x 6 _RANDOM 1 10 }; y", problems: []string{"2 substitution warning", "2 substitution warning"}},
		{name: "as keepalived -t shows", text: "a {\nk${_RANDOM 5 5}_tail more", want: "a { k5__RANDOM 5 5 }; _tail more",
			problems: []string{"2 substitution warning", "2 substitution warning"}},
		{name: "division by zero", text: "x ${_RANDOM 0 18446744073709551615}", want: "x 0",
			problems: []string{"1 substitution error"}},
		// Left as written, and then cut at its '{' like any line.
		{name: "params only for _RANDOM", text: "$A=1\nx ${A 2}", want: "x $ { A 2 }"},
		{name: "a trailing space in params is no use", text: "x \"${_RANDOM 1 }\"", want: `x "${_RANDOM 1 }"`},
	})
}

func TestRandomIsRepeatable(t *testing.T) {
	text := map[string]string{"etc/keepalived/keepalived.conf": "a ${_RANDOM}\nb ${_RANDOM 1 1000}"}
	first, _ := parseFiles(t, text, Options{})
	again, _ := parseFiles(t, text, Options{})
	if a, b := render(first.Root.Children), render(again.Root.Children); a != b {
		t.Errorf("two reads differ: %s and %s", a, b)
	}
}

func TestMultilineDefinitions(t *testing.T) {
	const instance = `$INSTANCE= \
    vrrp_instance VI_${NUM} { \
        interface eth0.${NUM} \
        @high priority 130 \
        @low priority 120 \
        virtual_ipaddress { \
            10.0.${NUM}.254/24 \
        } \
    }

$NUM=0
$INSTANCE

$NUM=1
$INSTANCE
`
	const nested = `$RS= \
real_server 192.168.${VS}.${RS_NUM} 80 { \
  weight 1 \
}
$VSDEF= \
virtual_server 10.0.${VS}.4 80 { \
  $RS_NUM=1 \
  $RS \
  $RS_NUM=2 \
  $RS \
}
$VS=0
$VSDEF
$VS=1
$VSDEF
`
	rs := func(vs, n string) string { return "real_server 192.168." + vs + "." + n + " 80 { weight 1 }" }
	runTreeCases(t, []treeCase{
		{name: "keepalived.conf(5)'s instance", text: instance, id: "high",
			want: "vrrp_instance VI_0 { interface eth0.0; priority 130; virtual_ipaddress { 10.0.0.254/24 } }; " +
				"vrrp_instance VI_1 { interface eth0.1; priority 130; virtual_ipaddress { 10.0.1.254/24 } }"},
		{name: "nested", text: nested,
			want: "virtual_server 10.0.0.4 80 { " + rs("0", "1") + "; " + rs("0", "2") + " }; " +
				"virtual_server 10.0.1.4 80 { " + rs("1", "1") + "; " + rs("1", "2") + " }"},
		{name: "only at the end of a line", text: "$M=\\\na\\\nb\nx $M y", want: "x $M y"},
		{name: "first line on the definition's line", text: "$M=a \\\nb\n$M", want: "a; b"},
		{name: "an empty line ends it", text: "$M=\\\na \\\n\nb\n$M", want: "b; a"},
		{name: "so does a comment line, as keepalived's VRRP and checker processes read it", text: "$M=\\\na \\\n# c\nb\n$M", want: "b; a"},
		{name: "text only on its last line makes a one-line definition", text: "$M=\\\nlast\nx $M y", want: "x last y"},
		{name: "with a ~SEQ", text: "$M=\\\nvs ${i} {\\\n}\n~SEQ(i, 1, 2) $M", want: "vs 1 { }; vs 2 { }"},
		{name: "include inside one", text: "$M=\\\ninclude x.conf \\\nb\n", want: "b",
			problems: []string{"2 include-unclear error"}},
	})
}

func TestSequenceOverMultilineDefinition(t *testing.T) {
	runTreeCases(t, []treeCase{
		{name: "keepalived reads past the value", text: "$M=0\\\n\n~SEQ(M, 1, 1)$M", want: "1",
			problems: []string{"3 substitution error"}},
	})
}
