package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// directConfig has a NAT, a DR (with a tunnelled real server and a sorry
// server), a GUE tunnel and an IPv6 DR service.
const directConfig = `
[[service]]
name = "nat"
vips = ["192.0.2.10"]
port = 80
snat = "always"
real_server = [{ address = "10.0.0.1", port = 8080 }]
[[service]]
name = "dr"
vips = ["192.0.2.20", "192.0.2.21"]
port = 80
forward = "dr"
source_ranges = ["198.18.1.0/24"]
quorum = 2
sorry_server = "10.0.0.99:80"
real_server = [{ address = "10.0.0.2" }, { address = "10.0.0.3", forward = "tun" }]
[[service]]
name = "gue"
vips = ["192.0.2.30"]
port = 53
protocol = "udp"
forward = "tun"
tunnel_type = "gue"
tunnel_port = 6080
real_server = [{ address = "10.0.0.4" }]
[[service]]
name = "dr6"
vips = ["2001:db8::80"]
port = 443
forward = "dr"
real_server = [{ address = "2001:db8:1::5" }]
`

// TestDirectSets checks that DR and tunnel services are NOTRACK, never
// masqueraded nor hairpinned, and keep their source ranges and the
// rejection of unserved ports (LBD-VIPS).
func TestDirectSets(t *testing.T) {
	st := Compute(Input{Config: parse(t, directConfig)})
	tests := []struct{ set, want string }{
		{"LBD-NOTRACK", "192.0.2.20,tcp:80 192.0.2.21,tcp:80 192.0.2.30,udp:53"},
		{"LBD6-NOTRACK", "2001:db8::80,tcp:443"},
		{"LBD-SERVICES", "192.0.2.10,tcp:80 192.0.2.20,tcp:80 192.0.2.21,tcp:80 192.0.2.30,udp:53"},
		{"LBD6-SERVICES", "2001:db8::80,tcp:443"},
		{"LBD-VIPS", "192.0.2.10 192.0.2.20 192.0.2.21 192.0.2.30"},
		{"LBD6-VIPS", "2001:db8::80"},
		{"LBD-MASQ-ALL", "192.0.2.10,tcp:80"},
		{"LBD-MASQ-AUTO", ""}, // the DR services' snat is the default, "auto"
		{"LBD6-MASQ-AUTO", ""},
		{"LBD-LOOPBACK", "10.0.0.1,tcp:8080,10.0.0.1"},
		{"LBD6-LOOPBACK", ""},
		{"LBD-RS-NETS", "10.0.0.1/32 10.0.0.2/32 10.0.0.3/32 10.0.0.4/32"},
		{"LBD-FW", "192.0.2.20,tcp:80 192.0.2.21,tcp:80"},
		{"LBD-SRC-RANGES", "192.0.2.20,tcp:80,198.18.1.0/24 192.0.2.21,tcp:80,198.18.1.0/24"},
		{"LBD-SRC-IPS", "192.0.2.20,tcp:80,192.0.2.20 192.0.2.21,tcp:80,192.0.2.21"},
	}
	for _, tt := range tests {
		if got := entries(st, tt.set); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.set, got, tt.want)
		}
	}
	methods := map[string]lvs.Method{}
	for _, s := range st.Services {
		methods[s.Name] = s.Method
	}
	if want := map[string]lvs.Method{"nat": lvs.NAT, "dr": lvs.DR, "gue": lvs.Tunnel, "dr6": lvs.DR}; !mapsEqual(methods, want) {
		t.Errorf("methods %v; want %v", methods, want)
	}
}

func mapsEqual[K, V comparable](a, b map[K]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestDirectDestinations checks each destination's method, the sorry
// server's included: it is forwarded to as its service is.
func TestDirectDestinations(t *testing.T) {
	cfg := parse(t, directConfig)
	tests := []struct {
		name   string
		health map[lvs.HealthKey]bool
		want   string // the dr service's destinations
	}{
		{"quorum met", nil, "10.0.0.2:80 dr, 10.0.0.3:80 ipip"},
		{"below quorum: the sorry server, by DR", map[lvs.HealthKey]bool{hk("dr", "10.0.0.2:80"): false},
			"10.0.0.2:80 dr, 10.0.0.3:80 ipip, 10.0.0.99:80 dr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := Compute(Input{Config: cfg, Health: tt.health})
			i := slices.IndexFunc(st.Services, func(s Service) bool { return s.Name == "dr" })
			var got []string
			for _, d := range st.Services[i].Dests {
				got = append(got, d.Addr.String()+" "+d.Forward().String())
			}
			if strings.Join(got, ", ") != tt.want {
				t.Errorf("destinations %q; want %q", strings.Join(got, ", "), tt.want)
			}
		})
	}
}

// TestDirectRules checks the rules that keep DR and tunnel traffic out
// of conntrack and of masquerading, in the form iptables-save prints.
func TestDirectRules(t *testing.T) {
	for _, tt := range []struct {
		family                 int
		masqRS, raw            string
		unserved4, unservedAny string
	}{
		{4, "-A LBD-SERVICES -m set --match-set LBD-SERVICES dst,dst -m set ! --match-set LBD-NOTRACK dst,dst -m set ! --match-set LBD-FWMARK dst,dst -m set --match-set LBD-RS-NETS src -j LBD-MARK-MASQ",
			"*raw\n:LBD-PREROUTING - [0:0]\n-A LBD-PREROUTING -m set --match-set LBD-NOTRACK dst,dst -j CT --notrack\nCOMMIT\n",
			"-A LBD-INPUT -p tcp -m conntrack --ctstate NEW -m set --match-set LBD-VIPS dst -j REJECT --reject-with tcp-reset",
			"-A LBD-INPUT -m conntrack --ctstate NEW -m set --match-set LBD-VIPS dst -j REJECT --reject-with icmp-port-unreachable"},
		{6, "-A LBD-SERVICES -m set --match-set LBD6-SERVICES dst,dst -m set ! --match-set LBD6-NOTRACK dst,dst -m set ! --match-set LBD6-FWMARK dst,dst -m set --match-set LBD6-RS-NETS src -j LBD-MARK-MASQ",
			"*raw\n:LBD-PREROUTING - [0:0]\n-A LBD-PREROUTING -m set --match-set LBD6-NOTRACK dst,dst -j CT --notrack\nCOMMIT\n",
			"-A LBD-INPUT -p tcp -m conntrack --ctstate NEW -m set --match-set LBD6-VIPS dst -j REJECT --reject-with tcp-reset",
			"-A LBD-INPUT -m conntrack --ctstate NEW -m set --match-set LBD6-VIPS dst -j REJECT --reject-with icmp6-port-unreachable"},
	} {
		tables := map[string]Table{}
		for _, tb := range Tables(config.Defaults().Dataplane, tt.family) {
			tables[tb.Name] = tb
		}
		if got := RestoreInput(tables["raw"]); got != tt.raw {
			t.Errorf("IPv%d raw:\n%s\nwant:\n%s", tt.family, got, tt.raw)
		}
		if j := tables["raw"].Jumps; len(j) != 1 || j[0] != (Jump{From: "PREROUTING", To: "LBD-PREROUTING"}) {
			t.Errorf("IPv%d raw jumps %v; want one from PREROUTING", tt.family, j)
		}
		// The one rule that marks for masquerading by a set DR and tunnel
		// services are in (the others' sets never hold them) excludes
		// the NOTRACK set (and what lbd marks for firewall-mark services).
		var bySet []string
		for _, r := range tables["nat"].Rules {
			if strings.HasSuffix(r, "-j LBD-MARK-MASQ") && strings.Contains(r, "--match-set "+SetName(SetServices, tt.family)+" ") {
				bySet = append(bySet, r)
			}
		}
		if len(bySet) != 1 || bySet[0] != tt.masqRS {
			t.Errorf("IPv%d: %q\nwant %s", tt.family, bySet, tt.masqRS)
		}
		// Served VIP:ports are accepted whatever their conntrack state
		// (NOTRACK makes it UNTRACKED), before the rejection of NEW
		// connections to the VIPs' other ports, which are still tracked.
		in := tables["filter"].Rules
		accept := slices.Index(in, "-A LBD-INPUT -m set --match-set "+SetName(SetServices, tt.family)+" dst,dst -j ACCEPT")
		r4, r := slices.Index(in, tt.unserved4), slices.Index(in, tt.unservedAny)
		if accept < 0 || r4 < accept || r < accept {
			t.Errorf("IPv%d LBD-INPUT: accept at %d, rejections at %d and %d:\n%s", tt.family, accept, r4, r, strings.Join(in, "\n"))
		}
	}
}

// TestPlanShowsNoTrack checks that `lbd plan` shows the NOTRACK set with
// its entries and the raw table.
func TestPlanShowsNoTrack(t *testing.T) {
	cfg := parse(t, directConfig)
	var b strings.Builder
	if err := WritePlan(&b, Compute(Input{Config: cfg, HostAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}}), cfg); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"create LBD-NOTRACK hash:ip,port family inet\nadd LBD-NOTRACK 192.0.2.20,tcp:80\nadd LBD-NOTRACK 192.0.2.21,tcp:80\nadd LBD-NOTRACK 192.0.2.30,udp:53\n",
		"create LBD6-NOTRACK hash:ip,port family inet6\nadd LBD6-NOTRACK 2001:db8::80,tcp:443\n",
		"-A LBD-PREROUTING -m set --match-set LBD-NOTRACK dst,dst -j CT --notrack\nCOMMIT\n# jump: -A PREROUTING -m comment --comment lbd -j LBD-PREROUTING\n",
		"-a -t 192.0.2.20:80 -r 10.0.0.3:80 -i -w 1 --tun-type ipip\n",
		"-a -u 192.0.2.30:53 -r 10.0.0.4:53 -i -w 1 --tun-type gue --tun-port 6080 --tun-nocsum\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("plan lacks:\n%s\nplan:\n%s", want, b.String())
		}
	}
}

// TestSameMembersSeesTheMethod: a service turned from NAT to DR needs
// other members.
func TestSameMembersSeesTheMethod(t *testing.T) {
	a := Service{Key: lvs.Key{Addr: netip.MustParseAddr("192.0.2.20"), Port: 80, Protocol: lvs.TCP}}
	b := a
	b.Method = lvs.DR
	if SameMembers(&a, &b) {
		t.Error("a NAT and a DR virtual server have the same members")
	}
}
