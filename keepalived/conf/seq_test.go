package conf

import (
	"math"
	"strings"
	"testing"
)

func TestSequences(t *testing.T) {
	runTreeCases(t, []treeCase{
		{name: "keepalived.conf(5)'s first example", text: "~SEQ(SUBNET, 0, 3) ip_address 10.0.${SUBNET}.1",
			want: "ip_address 10.0.0.1; ip_address 10.0.1.1; ip_address 10.0.2.1; ip_address 10.0.3.1"},
		{name: "hexadecimal", text: "~SEQx(SUBNET, 144, 16, 192) ip_address fe80::20:${SUBNET}:1",
			want: "ip_address fe80::20:90:1; ip_address fe80::20:a0:1; ip_address fe80::20:b0:1; ip_address fe80::20:c0:1"},
		{name: "C numbers", text: "~SEQx(S, 0x90, 0x10, 0xa0) a ${S}\n~SEQ(o, 010, 011) b $o",
			want: "a 90; a a0; b 8; b 9"},
		{name: "end only", text: "~SEQ(i, 3) x$i", want: "x1; x2; x3"},
		{name: "end only, zero counts down from 1", text: "~SEQ(i, 0) x $i", want: "x 1; x 0"},
		{name: "end only, negative", text: "~SEQ(i, -2) x $i", want: "x -1; x -2"},
		{name: "start and end, down", text: "~SEQ(i, 5, 3) x $i", want: "x 5; x 4; x 3"},
		{name: "step", text: "~SEQ(i, 10, -5, 0) x $i", want: "x 10; x 5; x 0"},
		{name: "numbers from parameters", text: "$N=3\n~SEQ(i, 1, $N) x ${i}", want: "x 1; x 2; x 3"},
		{name: "nested", text: "~SEQ(a,1,2) ~SEQ(b,1,2) x $a $b", want: "x 1 1; x 1 2; x 2 1; x 2 2"},
		{name: "no text", text: "~SEQ(i, 1, 3)\nx $i", want: "x 3"},
		{name: "in a block", text: "virtual_ipaddress {\n~SEQ(i, 1, 2) 192.0.2.${i}/32\n}",
			want: "virtual_ipaddress { 192.0.2.1/32; 192.0.2.2/32 }"},
		{name: "blocks", text: "~SEQ(i, 1, 2) real_server 10.0.0.${i} 80 { weight ${i} }",
			want: "real_server 10.0.0.1 80 { weight 1 }; real_server 10.0.0.2 80 { weight 2 }"},
		{name: "include in a sequence", text: "~SEQ(i, 1, 1) include /none${i}.conf", want: "",
			problems: []string{"1 include-unclear error", "1 include warning"}},
		{name: "no '('", text: "~SEQ i, 1\nx 1", want: "x 1", problems: []string{"1 sequence error"}},
		{name: "no variable", text: "~SEQ(, 1, 2) x", want: "", problems: []string{"1 sequence error"}},
		{name: "no ')'", text: "~SEQ(i, 1, 2 x", want: "", problems: []string{"1 sequence error"}},
		{name: "step 0", text: "~SEQ(i, 1, 0, 5) x", want: "", problems: []string{"1 sequence error"}},
		{name: "step the wrong way", text: "~SEQ(i, 5, 1, 3) x", want: "", problems: []string{"1 sequence error"}},
		{name: "not octal", text: "~SEQ(i, 08, 10) x", want: "", problems: []string{"1 sequence error"}},
		{name: "hexadecimal below zero", text: "~SEQx(i, -1, 2) x", want: "", problems: []string{"1 sequence error"}},
		{name: "numbers too long", text: "~SEQ(i, 1, " + strings.Repeat("0", 70) + "1) x", want: "",
			problems: []string{"1 sequence error"}},
		{name: "ends where keepalived's long would overflow", text: "~SEQ(i, 9223372036854775806, 9223372036854775807) x $i\n~SEQ(j, 9223372036854775807, 1, 9223372036854775807) y $j",
			want: "x 9223372036854775806; x 9223372036854775807; y 9223372036854775807"},
	})
}

func TestLists(t *testing.T) {
	runTreeCases(t, []treeCase{
		{name: "one variable", text: "~LST(IP, 10, 20) x ${IP}", want: "x 10; x 20"},
		{name: "keepalived.conf(5)'s example", text: "~LST({IP, IP1}, {10,1},{20,4},{5,6},{12,8}) 192.168.${IP}.${IP1}",
			want: "192.168.10.1; 192.168.20.4; 192.168.5.6; 192.168.12.8"},
		{name: "missing values are empty", text: "~LST({a, b}, {1}, {2, 3}) x ${a}-${b}", want: "x 1-; x 2-3"},
		{name: "nested", text: "~LST(a, x, y) ~LST(b, 1, 2) v ${a}${b}", want: "v x1; v x2; v y1; v y2"},
		{name: "too many values", text: "~LST({a}, {1, 2}) x", want: "", problems: []string{"1 sequence error"}},
		{name: "no values", text: "~LST(a) x", want: "", problems: []string{"1 sequence error"}},
	})
}

func TestStrtol(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		end  int
	}{
		{"42)", 42, 2},
		{"  -7,", -7, 4},
		{"+0x1F)", 31, 5},
		{"017", 15, 3},
		{"08", 0, 1},
		{"0x", 0, 1},
		{")", 0, 0},
		{" ,", 0, 0},
		{"99999999999999999999", math.MaxInt64, 20},
		{"-99999999999999999999", math.MinInt64, 21},
		{"-9223372036854775808", math.MinInt64, 20},
	} {
		got, end := strtol(tc.in, 0)
		if got != tc.want || end != tc.end {
			t.Errorf("strtol(%q) = %d, %d; want %d, %d", tc.in, got, end, tc.want, tc.end)
		}
	}
}
