package status

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/onlink"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/lvs"
)

func TestForwardText(t *testing.T) {
	tests := []struct {
		f    lvs.Forward
		want string
	}{
		{lvs.Forward{}, ""},
		{lvs.Forward{Method: lvs.DR}, "dr"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.IPIP}, "tun ipip"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080}, "tun gue:6080"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080, Checksum: lvs.Checksummed}, "tun gue:6080 csum"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 5555, Checksum: lvs.RemoteChecksum}, "tun gue:5555 remcsum"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE}, "tun gre"},
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GRE, Checksum: lvs.Checksummed}, "tun gre csum"},
		// IPIP has no checksum option: a stray one is not shown.
		{lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.IPIP, Checksum: lvs.Checksummed}, "tun ipip"},
	}
	for _, tt := range tests {
		if got := ForwardText(tt.f); got != tt.want {
			t.Errorf("ForwardText(%+v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}

// forwardView is a DR service whose real servers mix direct routing and
// tunnels, and a NAT one.
func forwardView() dataplane.View {
	dr := lvs.Key{Addr: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: lvs.TCP}
	nat := lvs.Key{Addr: netip.MustParseAddr("198.18.0.11"), Port: 53, Protocol: lvs.UDP}
	rs := func(addr string, f lvs.Forward, file string, line int) desired.Dest {
		return desired.Dest{Addr: netip.MustParseAddrPort(addr), Weight: 1, Real: &config.RealServer{Forward: f, Weight: 1, Pos: config.Pos{File: file, Line: line}}}
	}
	return dataplane.View{
		Last: dataplane.SyncResult{Start: time.Unix(1000, 0), Duration: time.Millisecond},
		Desired: desired.State{Services: []desired.Service{
			{Key: dr, Scheduler: "wrr", Name: "web", Method: lvs.DR, Source: config.Pos{File: "web.toml", Line: 1}, Dests: []desired.Dest{
				rs("198.18.1.5:80", lvs.Forward{Method: lvs.DR}, "web.toml", 7),
				rs("198.18.2.5:80", lvs.Forward{Method: lvs.DR}, "web.toml", 9),
				rs("198.18.3.5:80", lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080, Checksum: lvs.Checksummed}, "web.toml", 11),
			}},
			{Key: nat, Scheduler: "rr", Name: "dns", Source: config.Pos{File: "dns.toml", Line: 1}, Dests: []desired.Dest{rs("10.0.0.1:53", lvs.Forward{}, "dns.toml", 4)}},
		}},
		Kernel: map[lvs.Key]map[netip.AddrPort]int{},
	}
}

func TestForwardingInStatus(t *testing.T) {
	v := forwardView()
	snap := Build("1.0", time.Unix(1010, 0), file.Status{Path: "/etc/lbd/lbd.toml", Files: []string{"a"}, Loaded: time.Unix(990, 0), Hash: "abc"}, v, nil, nil)
	off := v.Desired.Services[0].Dests[1]
	snap.AddOffLink(onlink.Check([]onlink.Dest{{Service: "web", Addr: off.Addr, Source: off.Source()}}, nil))
	var b strings.Builder
	if err := WriteText(&b, snap); err != nil {
		t.Fatal(err)
	}
	want := `VIRTUAL SERVER / REAL SERVER  FORWARD            SCHED  CONFIG  DESIRED  KERNEL  ACTIVE  INACT  HEALTH  SOURCE
198.18.0.10:80/tcp (web)      dr                 wrr                                                    web.toml:1
  -> 198.18.1.5:80            dr                        1       1        -       -       -      -       web.toml:7
  -> 198.18.2.5:80            dr                        1       1        -       -       -      -       web.toml:9
  -> 198.18.3.5:80            tun gue:6080 csum         1       1        -       -       -      -       web.toml:11
198.18.0.11:53/udp (dns)      nat                rr                                                     dns.toml:1
  -> 10.0.0.1:53                                        1       1        -       -       -      -       dns.toml:4

problems (1), none refused or drained:
  web.toml:9: real server 198.18.2.5:80 of service web forwards by direct routing, but no connected route of this director covers 198.18.2.5: `
	got := b.String()
	if i := strings.Index(got, "VIRTUAL SERVER"); i < 0 || !strings.HasPrefix(got[i:], want) {
		t.Errorf("got:\n%s\nwant it to contain:\n%s", got, want)
	}

	js, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Services []struct {
			Forward     string           `json:"forward"`
			RealServers []map[string]any `json:"real_servers"`
		} `json:"services"`
		Problems []Problem `json:"problems"`
	}
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if back.Services[0].Forward != "dr" || back.Services[1].Forward != "nat" {
		t.Errorf("services' forward: %q, %q; want dr, nat", back.Services[0].Forward, back.Services[1].Forward)
	}
	if f := back.Services[0].RealServers[2]["forward"]; f != "tun gue:6080 csum" {
		t.Errorf("a tunnel real server's forward: %v", f)
	}
	if _, ok := back.Services[1].RealServers[0]["forward"]; ok {
		t.Errorf("a NAT real server has a forward key: %v", back.Services[1].RealServers[0])
	}
	p := back.Problems
	if len(p) != 1 || p[0].Kind != "dr_not_on_link" || p[0].Source != "web.toml:9" || p[0].Service != "web" || p[0].RealServer != "198.18.2.5:80" ||
		!strings.Contains(p[0].Message, "neither refuses nor drains") {
		t.Errorf("problems in JSON: %+v", p)
	}
}
