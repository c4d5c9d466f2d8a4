package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
)

func entries(st State, set string) string {
	es := slices.SortedFunc(slices.Values(st.SetEntries()[set]), SetEntry.Compare)
	var out []string
	for _, e := range es {
		out = append(out, e.String())
	}
	return strings.Join(out, " ")
}

func TestFilterSets(t *testing.T) {
	cfg := parse(t, `
[dataplane]
local_networks = ["203.0.113.0/24"]
node_cidrs = ["198.51.100.0/24", "2001:db8:ff::/64"]
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
snat = "always"
source_ranges = ["198.18.1.0/24"]
real_server = [{ address = "10.0.0.1", port = 8080 }]
[[service]]
name = "np"
vips = ["192.0.2.20"]
port = 443
node_port = 30443
real_server = [{ address = "10.0.0.2" }]
[[service]]
name = "dns"
vips = ["2001:db8::53"]
port = 53
protocol = "udp"
snat = "never"
announce = "route"
real_server = [{ address = "2001:db8:1::5" }]
[[service]]
name = "arp"
vips = ["192.0.2.30"]
port = 80
announce = "arp"
announce_interface = "eth1"
`)
	host := []netip.Addr{
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("fe80::1"),
		netip.MustParseAddr("192.0.2.20"), // a VIP: never a node address
		netip.MustParseAddr("10.9.9.9"),   // outside node_cidrs
		netip.MustParseAddr("2001:db8:ff::7"),
	}
	st := Compute(Input{Config: cfg, HostAddrs: host})
	tests := []struct{ set, want string }{
		{"LBD-SERVICES", "192.0.2.10,tcp:80 192.0.2.20,tcp:443 192.0.2.30,tcp:80 198.51.100.7,tcp:30443"},
		{"LBD-NODE-PORTS", "198.51.100.7,tcp:30443"},
		{"LBD-VIPS", "192.0.2.10 192.0.2.20 192.0.2.30"},
		{"LBD6-VIPS", "2001:db8::53"},
		{"LBD6-SERVICES", "2001:db8::53,udp:53"},
		{"LBD-MASQ-ALL", "192.0.2.10,tcp:80"},
		{"LBD-MASQ-AUTO", "192.0.2.20,tcp:443 192.0.2.30,tcp:80 198.51.100.7,tcp:30443"},
		{"LBD6-MASQ-AUTO", ""},
		{"LBD-LOCAL-NETS", "203.0.113.0/24"},
		{"LBD-RS-NETS", "10.0.0.1/32 10.0.0.2/32"},
		{"LBD6-RS-NETS", "2001:db8:1::5/128"},
		{"LBD-LOOPBACK", "10.0.0.1,tcp:8080,10.0.0.1 10.0.0.2,tcp:443,10.0.0.2"},
		{"LBD-FW", "192.0.2.10,tcp:80"},
		{"LBD-SRC-RANGES", "192.0.2.10,tcp:80,198.18.1.0/24"},
		{"LBD-SRC-IPS", "192.0.2.10,tcp:80,10.9.9.9 192.0.2.10,tcp:80,127.0.0.1 192.0.2.10,tcp:80,192.0.2.10 192.0.2.10,tcp:80,192.0.2.20 192.0.2.10,tcp:80,198.51.100.7"},
	}
	for _, tt := range tests {
		if got := entries(st, tt.set); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.set, got, tt.want)
		}
	}
	if n := len(st.SetEntries()); n != len(SetSpecs()) {
		t.Errorf("%d sets; want every set lbd owns (%d), empty ones included", n, len(SetSpecs()))
	}
	if got := st.NodeAddrs; !slices.Equal(got, []netip.Addr{netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("2001:db8:ff::7")}) {
		t.Errorf("node addresses %v", got)
	}
	// The NodePort-like service is an IPVS virtual server on the IPv4 node
	// address only (the service is IPv4).
	var keys []string
	for _, s := range st.Services {
		keys = append(keys, s.Key.String())
	}
	if want := "192.0.2.10:80/tcp 192.0.2.20:443/tcp 192.0.2.30:80/tcp 198.51.100.7:30443/tcp [2001:db8::53]:53/udp"; strings.Join(keys, " ") != want {
		t.Errorf("virtual servers %q\nwant %q", strings.Join(keys, " "), want)
	}
	if got := st.Announce; len(got) != 1 || !slices.Equal(got["eth1"], []netip.Addr{netip.MustParseAddr("192.0.2.30")}) {
		t.Errorf("announce %v", got)
	}
}

func TestRealServerNetworksReplaceAddresses(t *testing.T) {
	st := Compute(Input{Config: parse(t, `
[dataplane]
real_server_networks = ["10.0.0.0/24"]
[[service]]
name = "web"
vips = ["192.0.2.10"]
port = 80
real_server = [{ address = "10.0.0.1" }]
`)})
	if got := entries(st, "LBD-RS-NETS"); got != "10.0.0.0/24" {
		t.Errorf("LBD-RS-NETS = %q", got)
	}
}

func TestTablesDoNotGrowWithServices(t *testing.T) {
	dp := config.Defaults().Dataplane
	for _, fam := range []int{4, 6} {
		n := 0
		for _, tb := range Tables(dp, fam) {
			n += len(tb.Rules) + len(tb.Jumps)
			if !strings.HasPrefix(RestoreInput(tb), "*"+tb.Name+"\n") {
				t.Errorf("restore input of %s: %q", tb.Name, RestoreInput(tb))
			}
		}
		if n != 25 {
			t.Errorf("IPv%d: %d rules; the fixed rule set has 25", fam, n)
		}
	}
	dp.MasqueradeBit = 10
	nat := RestoreInput(Tables(dp, 4)[0])
	if !strings.Contains(nat, "--set-xmark 0x400/0x400") || !strings.Contains(nat, "! --mark 0x400/0x400") {
		t.Errorf("masquerade_bit 10 not used:\n%s", nat)
	}
}
