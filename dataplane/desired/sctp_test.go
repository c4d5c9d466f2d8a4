package desired

import (
	"net/netip"
	"strings"
	"testing"
)

// sctpConfig has SCTP services of every kind: NAT with source ranges and
// a node port, direct routing, IPv6, and a firewall-mark service lbd
// marks on two SCTP ports.
const sctpConfig = `
[dataplane]
node_cidrs = ["198.51.100.0/24"]

[[service]]
name = "sigtran"
vips = ["192.0.2.10"]
port = 2905
protocol = "sctp"
node_port = 30905
source_ranges = ["198.18.1.0/24"]
real_server = [{ address = "10.0.0.1" }, { address = "10.0.0.2", port = 2906 }]

[[service]]
name = "diameter"
vips = ["192.0.2.20"]
port = 3868
protocol = "sctp"
forward = "dr"
real_server = [{ address = "10.0.0.3" }]

[[service]]
name = "diameter6"
vips = ["2001:db8::20"]
port = 3868
protocol = "sctp"
real_server = [{ address = "2001:db8:1::5" }]

[[service]]
name = "marked"
fwmark = 9
vips = ["192.0.2.30"]
ports = [36412, 36422]
health_check = { port = 36412 }
protocol = "sctp"
real_server = [{ address = "10.0.0.4" }]
`

// TestSCTPState checks an SCTP service's virtual servers, set entries
// (kube-proxy's "IP,sctp:PORT") and plan: SCTP is a protocol like TCP and
// UDP to everything lbd writes.
func TestSCTPState(t *testing.T) {
	st := Compute(Input{Config: parse(t, sctpConfig), HostAddrs: []netip.Addr{netip.MustParseAddr("198.51.100.7")}})
	var keys []string
	for _, s := range st.Services {
		keys = append(keys, s.Key.String())
	}
	if got, want := strings.Join(keys, " "), "192.0.2.10:2905/sctp 192.0.2.20:3868/sctp 198.51.100.7:30905/sctp [2001:db8::20]:3868/sctp fwmark:9/ipv4"; got != want {
		t.Errorf("virtual servers %q\nwant %q", got, want)
	}
	for _, tt := range []struct{ set, want string }{
		{"LBD-SERVICES", "192.0.2.10,sctp:2905 192.0.2.20,sctp:3868 192.0.2.30,sctp:36412 192.0.2.30,sctp:36422 198.51.100.7,sctp:30905"},
		{"LBD6-SERVICES", "2001:db8::20,sctp:3868"},
		{"LBD-NODE-PORTS", "198.51.100.7,sctp:30905"},
		{"LBD-MASQ-AUTO", "192.0.2.10,sctp:2905 198.51.100.7,sctp:30905"},
		{"LBD6-MASQ-AUTO", "2001:db8::20,sctp:3868"},
		{"LBD-NOTRACK", "192.0.2.20,sctp:3868"},
		{"LBD-LOOPBACK", "10.0.0.1,sctp:2905,10.0.0.1 10.0.0.2,sctp:2906,10.0.0.2"},
		{"LBD6-LOOPBACK", "2001:db8:1::5,sctp:3868,2001:db8:1::5"},
		{"LBD-FW", "192.0.2.10,sctp:2905 198.51.100.7,sctp:30905"},
		{"LBD-SRC-RANGES", "192.0.2.10,sctp:2905,198.18.1.0/24 198.51.100.7,sctp:30905,198.18.1.0/24"},
		{"LBD-FWMARK", "192.0.2.30,sctp:36412 skbmark 0x9 192.0.2.30,sctp:36422 skbmark 0x9"},
	} {
		if got := entries(st, tt.set); got != tt.want {
			t.Errorf("%s:\n got %q\nwant %q", tt.set, got, tt.want)
		}
	}
	var b strings.Builder
	if err := WriteIPVS(&b, st); err != nil {
		t.Fatal(err)
	}
	// ipvsadm -Sn's own form: SCTP has no short option.
	for _, line := range []string{
		"-A --sctp-service 192.0.2.10:2905 -s wrr",
		"-a --sctp-service 192.0.2.10:2905 -r 10.0.0.2:2906 -m -w 1",
		"-a --sctp-service 192.0.2.20:3868 -r 10.0.0.3:3868 -g -w 1",
		"-A --sctp-service 198.51.100.7:30905 -s wrr",
		"-A --sctp-service [2001:db8::20]:3868 -s wrr",
		"-a --sctp-service [2001:db8::20]:3868 -r [2001:db8:1::5]:3868 -m -w 1",
		"-A -f 9 -s wrr",
	} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("plan lacks %q:\n%s", line, b.String())
		}
	}
}
