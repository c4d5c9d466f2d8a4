package desired

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// TestWriteIPVSForms checks the ipvsadm forms of firewall-mark virtual
// servers and of every forwarding method, as `lbd plan` prints them.
func TestWriteIPVSForms(t *testing.T) {
	dest := func(addr string, f lvs.Forward) Dest {
		ap := netip.MustParseAddrPort(addr)
		return Dest{Addr: ap, Weight: 1, Real: &config.RealServer{Address: ap.Addr(), Port: ap.Port(), Weight: 1, Forward: f}}
	}
	tests := []struct {
		name string
		svc  Service
		want string
	}{
		{"fwmark IPv4, direct routing", Service{Key: lvs.FWMarkKey(7, lvs.IPv4), Scheduler: "rr",
			Dests: []Dest{dest("198.19.0.1:0", lvs.Forward{Method: lvs.DR})}},
			"-A -f 7 -s rr\n-a -f 7 -r 198.19.0.1:0 -g -w 1\n"},
		{"fwmark IPv6, IPIP", Service{Key: lvs.FWMarkKey(8, lvs.IPv6), Scheduler: "rr",
			Dests: []Dest{dest("[2001:2::1]:0", lvs.Forward{Method: lvs.Tunnel})}},
			"-A -f 8 -6 -s rr\n-a -f 8 -6 -r [2001:2::1]:0 -i -w 1 --tun-type ipip\n"},
		{"GUE with checksums", Service{Key: lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Protocol: lvs.TCP}, Scheduler: "mh",
			Dests: []Dest{dest("198.19.0.2:80", lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080, Checksum: lvs.Checksummed})}},
			"-A -t 198.18.0.1:80 -s mh\n-a -t 198.18.0.1:80 -r 198.19.0.2:80 -i -w 1 --tun-type gue --tun-port 6080 --tun-csum\n"},
		{"GRE, NAT beside it", Service{Key: lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 53, Protocol: lvs.UDP}, Scheduler: "rr",
			Dests: []Dest{dest("198.19.0.3:53", lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE}), dest("198.19.0.4:53", lvs.Forward{})}},
			"-A -u 198.18.0.1:53 -s rr\n-a -u 198.18.0.1:53 -r 198.19.0.3:53 -i -w 1 --tun-type gre --tun-nocsum\n-a -u 198.18.0.1:53 -r 198.19.0.4:53 -m -w 1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteIPVS(&b, State{Services: []Service{tt.svc}}); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got:\n%swant:\n%s", b.String(), tt.want)
			}
		})
	}
}

// A NodePort-like service with no node address is not left out silently.
func TestWritePlanSaysWhatIsLeftOut(t *testing.T) {
	cfg := parse(t, `
[dataplane]
node_cidrs = ["198.18.0.0/24"]

[[service]]
name = "ingress"
port = 80
node_port = 30080
real_server = [{ address = "10.0.0.1" }]
`)
	tests := []struct {
		name string
		host []netip.Addr
		want string
	}{
		{"no node address", []netip.Addr{netip.MustParseAddr("203.0.113.5")},
			"no address of this box is in node_cidrs [198.18.0.0/24],\n# so the node ports of ingress are left out"},
		{"a node address", []netip.Addr{netip.MustParseAddr("198.18.0.5")},
			"# node addresses (NodePort-like services)\n198.18.0.5\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := WritePlan(&b, Compute(Input{Config: cfg, HostAddrs: tt.host}), cfg); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.want) {
				t.Errorf("plan:\n%s\nwant it to say:\n%s", b.String(), tt.want)
			}
		})
	}
}
