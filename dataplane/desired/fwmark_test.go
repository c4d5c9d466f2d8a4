package desired

import (
	"bytes"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

// fwmarkConfig has a firewall-mark service of each kind: lbd marks 80 and
// 443 (NAT, snat auto, source ranges), lbd marks a range (IPv6, snat
// always), lbd marks for direct routing, and the admin's own mark (NAT,
// snat never), beside a VIP:port service.
const fwmarkConfig = `
[dataplane]
local_networks = ["203.0.113.0/24"]
[[service]]
name = "web"
fwmark = 7
vips = ["192.0.2.10"]
ports = [80, 443]
session_affinity = true
source_ranges = ["198.18.1.0/24"]
health_check = { type = "tcp", port = 80 }
real_server = [{ address = "10.0.0.1" }, { address = "10.0.0.2" }]
[[service]]
name = "web6"
fwmark = 7
vips = ["2001:db8::10"]
ports = ["8000-8002"]
snat = "always"
health_check = { type = "none" }
real_server = [{ address = "2001:db8:1::5" }]
[[service]]
name = "direct"
fwmark = 8
vips = ["192.0.2.20"]
ports = [53]
protocol = "udp"
forward = "dr"
real_server = [{ address = "10.0.0.3" }]
[[service]]
name = "own"
fwmark = 9
snat = "never"
health_check = { type = "none" }
real_server = [{ address = "10.0.0.4" }]
[[service]]
name = "plain"
vips = ["192.0.2.30"]
port = 80
real_server = [{ address = "10.0.0.5" }]
`

func TestFWMarkVirtualServers(t *testing.T) {
	cfg := parse(t, fwmarkConfig)
	st := Compute(Input{Config: cfg})
	var plan bytes.Buffer
	if err := WriteIPVS(&plan, st); err != nil {
		t.Fatal(err)
	}
	want := `-A -t 192.0.2.30:80 -s wrr
-a -t 192.0.2.30:80 -r 10.0.0.5:80 -m -w 1
-A -f 7 -s wrr -p 10800
-a -f 7 -r 10.0.0.1:0 -m -w 1
-a -f 7 -r 10.0.0.2:0 -m -w 1
-A -f 7 -6 -s wrr
-a -f 7 -6 -r [2001:db8:1::5]:0 -m -w 1
-A -f 8 -s wrr
-a -f 8 -r 10.0.0.3:0 -g -w 1
-A -f 9 -s wrr
-a -f 9 -r 10.0.0.4:0 -m -w 1
`
	if plan.String() != want {
		t.Errorf("plan:\n%s\nwant:\n%s", plan.String(), want)
	}
	if got, want := st.VIPs, []netip.Addr{netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.20"), netip.MustParseAddr("192.0.2.30"), netip.MustParseAddr("2001:db8::10")}; !slices.Equal(got, want) {
		t.Errorf("VIPs %v; want %v (the marked services' bound like any)", got, want)
	}
	for _, s := range st.Services {
		if s.Key == lvs.FWMarkKey(7, lvs.IPv6) && s.Netmask != 128 {
			t.Errorf("%s: netmask %d; want 128", s.Key, s.Netmask)
		}
	}
	// Unchanged inputs: the same destinations, shared.
	next := Compute(Input{Config: cfg, Prev: &st})
	for i := range st.Services {
		if a, b := st.Services[i].Dests, next.Services[i].Dests; len(a) > 0 && &a[0] != &b[0] {
			t.Errorf("%s: destinations recomputed", st.Services[i].Key)
		}
		if !SameMembers(&st.Services[i], &next.Services[i]) {
			t.Errorf("%s: members differ", st.Services[i].Key)
		}
	}
}

func TestFWMarkSets(t *testing.T) {
	st := Compute(Input{Config: parse(t, fwmarkConfig), HostAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}})
	tests := []struct{ set, want string }{
		{"LBD-FWMARK", "192.0.2.10,tcp:80 skbmark 0x7 192.0.2.10,tcp:443 skbmark 0x7 192.0.2.20,udp:53 skbmark 0x8"},
		{"LBD6-FWMARK", "2001:db8::10,tcp:8000 skbmark 0x7 2001:db8::10,tcp:8001 skbmark 0x7 2001:db8::10,tcp:8002 skbmark 0x7"},
		{"LBD-SERVICES", "192.0.2.10,tcp:80 192.0.2.10,tcp:443 192.0.2.20,udp:53 192.0.2.30,tcp:80"},
		{"LBD6-SERVICES", "2001:db8::10,tcp:8000 2001:db8::10,tcp:8001 2001:db8::10,tcp:8002"},
		{"LBD-VIPS", "192.0.2.10 192.0.2.20 192.0.2.30"},
		// Only the VIP:port service: a marked packet with the masquerade
		// bit would miss its firewall-mark service.
		{"LBD-MASQ-AUTO", "192.0.2.30,tcp:80"},
		{"LBD-MASQ-ALL", ""}, {"LBD6-MASQ-ALL", ""},
		{"LBD-NOTRACK", "192.0.2.20,udp:53"},
		{"LBD-LOOPBACK", "10.0.0.5,tcp:80,10.0.0.5"},
		{"LBD-RS-NETS", "10.0.0.1/32 10.0.0.2/32 10.0.0.3/32 10.0.0.4/32 10.0.0.5/32"},
		{"LBD6-RS-NETS", "2001:db8:1::5/128"},
		{"LBD-FW", "192.0.2.10,tcp:80 192.0.2.10,tcp:443"},
		{"LBD-SRC-RANGES", "192.0.2.10,tcp:80,198.18.1.0/24 192.0.2.10,tcp:443,198.18.1.0/24"},
		{"LBD-SRC-IPS", "192.0.2.10,tcp:80,192.0.2.10 192.0.2.10,tcp:80,198.51.100.7 192.0.2.10,tcp:443,192.0.2.10 192.0.2.10,tcp:443,198.51.100.7"},
	}
	for _, tt := range tests {
		if got := entries(st, tt.set); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.set, got, tt.want)
		}
	}
	for _, spec := range SetSpecs() {
		if spec.SkbInfo != strings.HasSuffix(spec.Name, "-FWMARK") {
			t.Errorf("%s: skbinfo %v", spec.Name, spec.SkbInfo)
		}
	}
}

func TestFWMarkRules(t *testing.T) {
	cfg := parse(t, fwmarkConfig)
	masq := func(fam int) []string {
		var out []string
		for _, tb := range TablesFor(cfg, fam) {
			for _, r := range tb.Rules {
				if strings.Contains(r, "-m ipvs") {
					out = append(out, r)
				}
			}
		}
		return out
	}
	want4 := []string{
		"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x7 -m set ! --match-set LBD-LOCAL-NETS src -j LBD-MARK-MASQ",
		"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x7 -m set --match-set LBD-RS-NETS src -j LBD-MARK-MASQ",
		"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x9 -m set --match-set LBD-RS-NETS src -j LBD-MARK-MASQ",
	}
	if got := masq(4); !slices.Equal(got, want4) {
		t.Errorf("IPv4 masquerading:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want4, "\n"))
	}
	if got, want := masq(6), []string{"-A LBD-POSTROUTING -m ipvs --vdir ORIGINAL --vmethod MASQ -m mark --mark 0x7 -j LBD-MARK-MASQ"}; !slices.Equal(got, want) {
		t.Errorf("IPv6 masquerading: %q; want %q", got, want)
	}
	for _, fam := range []int{4, 6} {
		ts := TablesFor(cfg, fam)
		nat := ts[0]
		// Before the rule that lets unmarked packets go: after it, the
		// mark would come too late.
		at := slices.IndexFunc(nat.Rules, func(r string) bool { return strings.Contains(r, "-m ipvs") })
		ret := slices.Index(nat.Rules, "-A LBD-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN")
		if at < 0 || ret < 0 || at > ret {
			t.Errorf("IPv%d: masquerading at %d, RETURN at %d:\n%s", fam, at, ret, strings.Join(nat.Rules, "\n"))
		}
		mangle := ts[len(ts)-1]
		want := "*mangle\n:LBD-FWMARK - [0:0]\n-A LBD-FWMARK -j SET --map-set " + SetName(SetFWMark, fam) + " dst,dst --map-mark\nCOMMIT\n"
		if got := RestoreInput(mangle); got != want {
			t.Errorf("IPv%d mangle:\n%s\nwant:\n%s", fam, got, want)
		}
		if !slices.Equal(mangle.Jumps, []Jump{{From: "PREROUTING", To: "LBD-FWMARK"}, {From: "OUTPUT", To: "LBD-FWMARK"}}) {
			t.Errorf("IPv%d mangle jumps %v", fam, mangle.Jumps)
		}
	}
	// Without firewall-mark services the mangle table stays (fixed rules)
	// and nothing grows.
	plain := parse(t, "[[service]]\nname = \"plain\"\nvips = [\"192.0.2.30\"]\nport = 80\n")
	if ts := TablesFor(plain, 4); len(ts) != 4 || ts[3].Name != "mangle" || len(ts[0].Rules) != len(Tables(plain.Dataplane, 4)[0].Rules) {
		t.Errorf("tables without firewall-mark services: %+v", ts)
	}
}

func TestFWMarkPlan(t *testing.T) {
	cfg := parse(t, fwmarkConfig)
	var b bytes.Buffer
	if err := WritePlan(&b, Compute(Input{Config: cfg}), cfg); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"create LBD-FWMARK hash:ip,port family inet skbinfo\n",
		"add LBD-FWMARK 192.0.2.10,tcp:443 skbmark 0x7\n",
		"create LBD6-FWMARK hash:ip,port family inet6 skbinfo\n",
		"create LBD-SERVICES hash:ip,port family inet\n",
		"*mangle\n:LBD-FWMARK - [0:0]\n",
		"# jump: -A OUTPUT -m comment --comment lbd -j LBD-FWMARK\n",
	} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("plan lacks %q:\n%s", line, b.String())
		}
	}
}
