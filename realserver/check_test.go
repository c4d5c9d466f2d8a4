package realserver_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/realserver"
)

// lines renders a report as "status check => fix commands", one per item.
func lines(r realserver.Report) []string {
	var out []string
	for _, it := range r.Items {
		l := it.Status.String() + " " + it.Check
		if cmds := it.Commands(); len(cmds) > 0 {
			l += " => " + strings.Join(cmds, " && ")
		}
		out = append(out, l)
	}
	return out
}

func vips(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, v := range s {
		out = append(out, netip.MustParseAddr(v))
	}
	return out
}

func dr(v ...string) realserver.Spec { return realserver.Spec{Method: lvs.DR, VIPs: vips(v...)} }

func tun(e lvs.Encap, v ...string) realserver.Spec {
	return realserver.Spec{Method: lvs.Tunnel, Tunnel: e, GUEPort: 6080, VIPs: vips(v...)}
}

func addr(link, p string) realserver.Addr {
	return realserver.Addr{Link: link, Prefix: netip.MustParsePrefix(p)}
}

// withARP is a box whose ARP knobs DR wants.
func withARP(f *fakeKernel) *fakeKernel {
	return f.set("net/ipv4/conf/all/arp_ignore", "1").set("net/ipv4/conf/all/arp_announce", "2")
}

func TestCheck(t *testing.T) {
	const (
		ignoreAll   = "net.ipv4.conf.all.arp_ignore"
		announceAll = "net.ipv4.conf.all.arp_announce"
	)
	tests := []struct {
		name string
		spec realserver.Spec
		box  func() *fakeKernel
		want []string
	}{
		{"DR on a fresh box: the ARP knobs on all, then the VIP", dr("198.18.100.1"), newBox, []string{
			"ok lo is up",
			"fail " + ignoreAll + " => sysctl -w " + ignoreAll + "=1",
			"fail arp_ignore on eth0", // setting all fixes it: no fix of its own
			"fail " + announceAll + " => sysctl -w " + announceAll + "=2",
			"fail arp_announce on eth0",
			"fail VIP 198.18.100.1/32 on lo => ip addr add 198.18.100.1/32 dev lo",
		}},
		{"DR set up", dr("198.18.100.1"), func() *fakeKernel {
			f := withARP(newBox())
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/32"))
			return f
		}, []string{
			"ok lo is up", "ok " + ignoreAll, "ok arp_ignore on eth0", "ok " + announceAll, "ok arp_announce on eth0",
			"ok VIP 198.18.100.1/32 on lo",
		}},
		{"an interface's own value spoils the maximum: 3 answers for the VIP, above 2 announces it", dr("198.18.100.1"), func() *fakeKernel {
			f := withARP(newBox()).set("net/ipv4/conf/eth0/arp_ignore", "3").set("net/ipv4/conf/eth0/arp_announce", "5")
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/32"))
			return f
		}, []string{
			"ok lo is up", "ok " + ignoreAll,
			"fail arp_ignore on eth0 => sysctl -w net.ipv4.conf.eth0.arp_ignore=1",
			"ok " + announceAll,
			"fail arp_announce on eth0 => sysctl -w net.ipv4.conf.eth0.arp_announce=2",
			"ok VIP 198.18.100.1/32 on lo",
		}},
		{"arp_ignore 2 and 8 will do; NOARP links and VLAN names", dr("198.18.100.1"), func() *fakeKernel {
			f := newBox().set("net/ipv4/conf/all/arp_ignore", "2").set("net/ipv4/conf/all/arp_announce", "2")
			f.st.Links = append(f.st.Links, realserver.Link{Name: "eth0.100"}, realserver.Link{Name: "ifb0", NoARP: true})
			f.setKnobs("eth0.100", "0")
			f.setKnobs("ifb0", "0")
			f.set("net/ipv4/conf/eth0.100/arp_ignore", "8")
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/32"))
			return f
		}, []string{
			"ok lo is up", "ok " + ignoreAll, "ok arp_ignore on eth0", "ok arp_ignore on eth0.100",
			"ok " + announceAll, "ok arp_announce on eth0", "ok arp_announce on eth0.100",
			"ok VIP 198.18.100.1/32 on lo",
		}},
		{"the VIP on lo as a /24 fails, on eth0 warns; neither is removed by setup", dr("198.18.100.1"), func() *fakeKernel {
			f := withARP(newBox())
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/24"), addr("eth0", "198.18.100.1/24"))
			return f
		}, []string{
			"ok lo is up", "ok " + ignoreAll, "ok arp_ignore on eth0", "ok " + announceAll, "ok arp_announce on eth0",
			"fail VIP 198.18.100.1/32 on lo => ip addr del 198.18.100.1/24 dev lo && ip addr add 198.18.100.1/32 dev lo",
			"warn VIP 198.18.100.1 only on lo => ip addr del 198.18.100.1/24 dev eth0",
		}},
		{"IPv6 DR needs no sysctl; lo down", dr("2001:2::100"), func() *fakeKernel {
			f := newBox()
			f.st.Links[0].Up = false
			return f
		}, []string{
			"fail lo is up => ip link set lo up",
			"fail VIP 2001:2::100/128 on lo => ip addr add 2001:2::100/128 dev lo nodad",
		}},
		{"IPIP without its module", tun(lvs.IPIP, "198.18.100.1"), func() *fakeKernel {
			f := withARP(newBox())
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/32"))
			return f
		}, []string{
			"ok lo is up",
			"fail tunl0 is up => modprobe ipip",
			"ok " + ignoreAll, "ok arp_ignore on eth0", "ok " + announceAll, "ok arp_announce on eth0",
			"ok net.ipv4.conf.all.rp_filter",
			"ok VIP 198.18.100.1/32 on lo",
		}},
		{"IPIP: tunl0 down and filtering, the VIP on tunl0 will do", tun(lvs.IPIP, "198.18.100.1"), func() *fakeKernel {
			f := withARP(newBox()).set("net/ipv4/conf/all/rp_filter", "2")
			f.st.Links = append(f.st.Links, realserver.Link{Name: "tunl0", NoARP: true})
			f.setKnobs("tunl0", "1")
			f.st.Addrs = append(f.st.Addrs, addr("tunl0", "198.18.100.1/32"))
			return f
		}, []string{
			"ok lo is up",
			"fail tunl0 is up => ip link set tunl0 up",
			"ok " + ignoreAll, "ok arp_ignore on eth0", "ok " + announceAll, "ok arp_announce on eth0",
			"fail net.ipv4.conf.all.rp_filter => sysctl -w net.ipv4.conf.all.rp_filter=0",
			"fail rp_filter on tunl0 => sysctl -w net.ipv4.conf.tunl0.rp_filter=0",
			"ok VIP 198.18.100.1/32 on lo",
		}},
		{"GUE, both families: the fou ports, tunl0 and ip6tnl0", tun(lvs.GUE, "198.18.100.1", "2001:2::100"), func() *fakeKernel {
			f := withARP(newBox())
			f.st.Links = append(f.st.Links, realserver.Link{Name: "tunl0", Up: true, NoARP: true}, realserver.Link{Name: "ip6tnl0", Up: true, NoARP: true})
			f.setKnobs("tunl0", "0")
			f.st.Fou = []realserver.FouPort{{Port: 6080, V6: true}}
			f.st.Addrs = append(f.st.Addrs, addr("lo", "198.18.100.1/32"), addr("lo", "2001:2::100/128"))
			return f
		}, []string{
			"ok lo is up",
			"ok tunl0 is up",
			"fail fou port 6080 (GUE, IPv4) => modprobe fou && ip fou add port 6080 gue",
			"ok ip6tnl0 is up",
			"fail fou port 6080 (GUE, IPv6) => ip -6 fou del port 6080 && ip -6 fou add port 6080 gue",
			"ok " + ignoreAll, "ok arp_ignore on eth0", "ok " + announceAll, "ok arp_announce on eth0",
			"ok net.ipv4.conf.all.rp_filter", "ok rp_filter on tunl0",
			"ok VIP 198.18.100.1/32 on lo", "ok VIP 2001:2::100/128 on lo",
		}},
		{"GRE over IPv6 in a namespace without fallback devices", tun(lvs.GRE, "2001:2::100"), func() *fakeKernel {
			return newBox().set("net/core/fb_tunnels_only_for_init_net", "1")
		}, []string{
			"ok lo is up",
			"fail ip6gre0 is up => modprobe ip6_gre",
			"fail VIP 2001:2::100/128 on lo => ip addr add 2001:2::100/128 dev lo nodad",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := tt.box().Read()
			rep := realserver.Check(tt.spec, st)
			if got := lines(rep); !slices.Equal(got, tt.want) {
				t.Errorf("report:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			wantOK := !slices.ContainsFunc(tt.want, func(l string) bool { return strings.HasPrefix(l, "fail") })
			if rep.OK() != wantOK {
				t.Errorf("OK() = %v, want %v", rep.OK(), wantOK)
			}
		})
	}
}

// The details say what is wrong in the admin's words.
func TestCheckDetails(t *testing.T) {
	f := newBox().set("net/core/fb_tunnels_only_for_init_net", "1")
	st, _ := f.Read()
	var b strings.Builder
	realserver.WriteText(&b, realserver.Check(tun(lvs.IPIP, "198.18.100.1"), st))
	for _, want := range []string{
		"FAIL  tunl0 is up: tunl0 is missing: the ipip module makes it, but net.core.fb_tunnels_only_for_init_net=1 keeps it out of namespaces other than the first; fix: modprobe ipip",
		"FAIL  arp_ignore on eth0: max(all=0, eth0=0) = 0, needs 1 or 2: setting net.ipv4.conf.all.arp_ignore fixes it\n",
		"FAIL  VIP 198.18.100.1/32 on lo: missing: the box drops packets to the VIP; fix: ip addr add 198.18.100.1/32 dev lo",
		"\n2 ok, 6 failing, 0 warnings\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
