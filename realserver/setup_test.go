package realserver_test

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/realserver"
)

func TestSetup(t *testing.T) {
	tests := []struct {
		name string
		spec realserver.Spec
		box  func() *fakeKernel
		// want is what the first run does, in order.
		want []string
	}{
		{"DR: the ARP knobs before the VIPs, so the box never answers ARP for one", dr("198.18.100.1", "2001:2::100"), newBox, []string{
			"sysctl -w net.ipv4.conf.all.arp_ignore=1",
			"sysctl -w net.ipv4.conf.all.arp_announce=2",
			"ip addr add 198.18.100.1/32 dev lo",
			"ip addr add 2001:2::100/128 dev lo nodad",
		}},
		{"IPIP: the module, then (next round) its device up and unfiltered", tun(lvs.IPIP, "198.18.100.1"), func() *fakeKernel {
			return newBox().set("net/ipv4/conf/all/rp_filter", "1")
		}, []string{
			"modprobe ipip",
			"sysctl -w net.ipv4.conf.all.arp_ignore=1",
			"sysctl -w net.ipv4.conf.all.arp_announce=2",
			"sysctl -w net.ipv4.conf.all.rp_filter=0",
			"ip addr add 198.18.100.1/32 dev lo",
			"ip link set tunl0 up",
		}},
		{"GUE over IPv6: module, fou port, device", tun(lvs.GUE, "2001:2::100"), func() *fakeKernel {
			f := newBox()
			f.st.Links[0].Up = false
			return f
		}, []string{
			"modprobe ip6_tunnel",
			"modprobe fou6",
			"ip link set lo up",
			"ip -6 fou add port 6080 gue",
			"ip addr add 2001:2::100/128 dev lo nodad",
			"ip link set ip6tnl0 up",
		}},
		{"GRE: gre0 and its rp_filter; gretap0 answers ARP and is covered by all", tun(lvs.GRE, "198.18.100.1"), func() *fakeKernel {
			f := newBox()
			f.modules["ip_gre"] = []realserver.Link{{Name: "gre0", NoARP: true}, {Name: "gretap0"}}
			return f
		}, []string{
			"modprobe ip_gre",
			"sysctl -w net.ipv4.conf.all.arp_ignore=1",
			"sysctl -w net.ipv4.conf.all.arp_announce=2",
			"ip addr add 198.18.100.1/32 dev lo",
			"ip link set gre0 up",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.box()
			var rec realserver.Record
			res, err := realserver.Setup(f, tt.spec, &rec)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.applied, tt.want) {
				t.Errorf("applied:\n%s\nwant:\n%s", strings.Join(f.applied, "\n"), strings.Join(tt.want, "\n"))
			}
			if !res.Report.OK() || len(res.Done) != len(tt.want) {
				t.Errorf("report after setup (done %d):\n%s", len(res.Done), strings.Join(lines(res.Report), "\n"))
			}
			// Twice: nothing more to do.
			before := len(f.applied)
			again, err := realserver.Setup(f, tt.spec, &rec)
			if err != nil || len(again.Done) != 0 || len(f.applied) != before || !again.Report.OK() {
				t.Errorf("second run: done %v, err %v, applied %v", again.Done, err, f.applied[before:])
			}
			if len(rec.Entries) != len(tt.want) {
				t.Errorf("record holds %d entries, want %d: %+v", len(rec.Entries), len(tt.want), rec.Entries)
			}
		})
	}
}

// A fix that does not take (the module makes no device, as with
// fb_tunnels_only_for_init_net) is tried once; the report says what fails.
func TestSetupStopsWhenAFixDoesNotTake(t *testing.T) {
	f := withARP(newBox())
	f.modules["ipip"] = nil
	var rec realserver.Record
	res, err := realserver.Setup(f, tun(lvs.IPIP, "198.18.100.1"), &rec)
	if err != nil {
		t.Fatal(err)
	}
	if n := slices.Index(f.applied, "modprobe ipip"); n < 0 || slices.Contains(f.applied[n+1:], "modprobe ipip") {
		t.Errorf("applied %v, want modprobe ipip once", f.applied)
	}
	if res.Report.OK() || !slices.Contains(lines(res.Report), "fail tunl0 is up => modprobe ipip") {
		t.Errorf("report:\n%s", strings.Join(lines(res.Report), "\n"))
	}
}

func TestSetupRefusesABadSpec(t *testing.T) {
	f := newBox()
	_, err := realserver.Setup(f, realserver.Spec{Method: lvs.NAT, VIPs: vips("198.18.100.1")}, &realserver.Record{})
	if err == nil || len(f.applied) != 0 {
		t.Errorf("err %v, applied %v", err, f.applied)
	}
}

func TestUndo(t *testing.T) {
	f := newBox()
	orig, _ := f.Read()
	var rec realserver.Record
	if _, err := realserver.Setup(f, dr("198.18.100.1"), &rec); err != nil {
		t.Fatal(err)
	}
	if _, err := realserver.Setup(f, dr("198.18.100.2", "2001:2::100"), &rec); err != nil {
		t.Fatal(err)
	}
	f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.9/32")) // the admin's own
	f.applied = nil

	// One VIP: its address only; the others still need the sysctls.
	u, err := realserver.Undo(f, dr("198.18.100.1", "198.18.100.9"), &rec)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ip addr del 198.18.100.1/32 dev lo"}; !slices.Equal(f.applied, want) {
		t.Errorf("applied %v, want %v", f.applied, want)
	}
	if !containsPart(u.Left, "VIP 198.18.100.9: setup did not add it") || !containsPart(u.Left, "other VIPs that setup added still need them") {
		t.Errorf("left %q", u.Left)
	}

	// The admin changes arp_announce meanwhile: undo leaves it.
	f.set("net/ipv4/conf/all/arp_announce", "1")
	f.applied = nil
	u, err = realserver.Undo(f, dr("198.18.100.2", "2001:2::100"), &rec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ip addr del 198.18.100.2/32 dev lo",
		"ip addr del 2001:2::100/128 dev lo",
		"sysctl -w net.ipv4.conf.all.arp_ignore=0",
	}
	if !slices.Equal(f.applied, want) {
		t.Errorf("applied:\n%s\nwant:\n%s", strings.Join(f.applied, "\n"), strings.Join(want, "\n"))
	}
	if !containsPart(u.Left, `sysctl -w net.ipv4.conf.all.arp_announce=2: now "1", not the 2 setup wrote; left alone`) {
		t.Errorf("left %q", u.Left)
	}
	if len(rec.Entries) != 0 {
		t.Errorf("record still holds %+v", rec.Entries)
	}
	f.set("net/ipv4/conf/all/arp_announce", "0")
	got, _ := f.Read()
	got.Addrs = slices.DeleteFunc(got.Addrs, func(a realserver.Addr) bool { return a.Prefix.Addr() == netip.MustParseAddr("198.18.100.9") })
	if !slices.Equal(got.Addrs, orig.Addrs) || !maps.Equal(got.Sysctls, orig.Sysctls) {
		t.Errorf("after undo: %+v\nbefore setup: %+v", got, orig)
	}
}

// Undo takes down a tunnel device and its fou port, but leaves the module
// loaded and lo up.
func TestUndoTunnel(t *testing.T) {
	f := newBox()
	f.st.Links[0].Up = false
	var rec realserver.Record
	if _, err := realserver.Setup(f, tun(lvs.GUE, "198.18.100.1"), &rec); err != nil {
		t.Fatal(err)
	}
	f.applied = nil
	u, err := realserver.Undo(f, tun(lvs.GUE, "198.18.100.1"), &rec)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ip addr del 198.18.100.1/32 dev lo",
		"ip link set tunl0 down",
		"ip fou del port 6080",
		"sysctl -w net.ipv4.conf.all.arp_announce=0",
		"sysctl -w net.ipv4.conf.all.arp_ignore=0",
	}
	if !slices.Equal(f.applied, want) {
		t.Errorf("applied:\n%s\nwant:\n%s", strings.Join(f.applied, "\n"), strings.Join(want, "\n"))
	}
	if !containsPart(u.Left, "module ipip: stays loaded") {
		t.Errorf("left %q", u.Left)
	}
}

func containsPart(ss []string, part string) bool {
	return slices.ContainsFunc(ss, func(s string) bool { return strings.Contains(s, part) })
}

func TestRecordRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "run", "realserver.json")
	empty, err := realserver.LoadRecord(p)
	if err != nil || len(empty.Entries) != 0 {
		t.Fatalf("missing file: %+v, %v", empty, err)
	}
	f := newBox()
	var rec realserver.Record
	if _, err := realserver.Setup(f, tun(lvs.GUE, "198.18.100.1", "2001:2::100"), &rec); err != nil {
		t.Fatal(err)
	}
	if err := rec.Save(p); err != nil {
		t.Fatal(err)
	}
	back, err := realserver.LoadRecord(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Entries, rec.Entries) {
		t.Errorf("read back %+v\nwrote %+v", back.Entries, rec.Entries)
	}
	if err := (&realserver.Record{}).Save(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("an empty record left its file: %v", err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := realserver.LoadRecord(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("a broken record: %v", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		spec realserver.Spec
		want string // "" when valid
	}{
		{"DR", dr("198.18.100.1", "2001:2::100"), ""},
		{"NAT", realserver.Spec{Method: lvs.NAT, VIPs: vips("198.18.100.1")}, "expected dr or tun"},
		{"no VIP", dr(), "no VIP"},
		{"loopback", dr("127.0.0.2"), "not loopback"},
		{"link-local", dr("fe80::1"), "not loopback, link-local"},
		{"mapped", dr("::ffff:198.18.100.1"), "expected an IPv4 or IPv6 address"},
		{"twice", dr("198.18.100.1", "198.18.100.1"), "given twice"},
		{"GUE without a port", realserver.Spec{Method: lvs.Tunnel, Tunnel: lvs.GUE, VIPs: vips("198.18.100.1")}, "gue needs the UDP port"},
		{"unknown tunnel", realserver.Spec{Method: lvs.Tunnel, Tunnel: 7, VIPs: vips("198.18.100.1")}, "expected ipip, gue or gre"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if (err == nil) != (tt.want == "") || err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestActionInverse(t *testing.T) {
	p := netip.MustParsePrefix("198.18.100.1/32")
	tests := []struct {
		a    realserver.Action
		want string // the inverse's command, "" for none
	}{
		{realserver.Action{Kind: realserver.SetSysctl, Key: "net/ipv4/conf/eth0.100/arp_ignore", Value: "1", Was: "0"}, "sysctl -w net.ipv4.conf.eth0/100.arp_ignore=0"},
		{realserver.Action{Kind: realserver.AddAddr, Link: "lo", Prefix: p}, "ip addr del 198.18.100.1/32 dev lo"},
		{realserver.Action{Kind: realserver.AddFou, Port: 6080, V6: true}, "ip -6 fou del port 6080"},
		{realserver.Action{Kind: realserver.LinkUp, Link: "gre0"}, "ip link set gre0 down"},
		{realserver.Action{Kind: realserver.LinkUp, Link: "lo"}, ""},
		{realserver.Action{Kind: realserver.LoadModule, Module: "ipip"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.a.Command(), func(t *testing.T) {
			inv, ok := tt.a.Inverse()
			if got := map[bool]string{true: inv.Command(), false: ""}[ok]; got != tt.want {
				t.Errorf("inverse %q, want %q", got, tt.want)
			}
		})
	}
}
