package addrs_test

import (
	"net/netip"
	"testing"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/addrs/fakeaddrs"
)

func ips(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, x := range s {
		out = append(out, netip.MustParseAddr(x))
	}
	return out
}

func TestAddressApplier(t *testing.T) {
	k := &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{
		"eth0": {netip.MustParseAddr("198.51.100.7"): true},
		// Left over from an earlier configuration, and the kernel's own.
		"lbd0": {netip.MustParseAddr("192.0.2.99"): true, netip.MustParseAddr("fe80::1"): true},
	}}
	a := addrs.New(k, "lbd0")
	steps := []struct {
		name          string
		vips          []netip.Addr
		full          bool
		drift         func()
		dumps, writes int
		want          string
	}{
		{"first sync binds VIPs, unbinds leftovers, leaves other links and link-local alone",
			ips("192.0.2.10", "2001:db8::10", "198.51.100.7"), false, nil, 1, 3,
			"eth0: 198.51.100.7\nlbd0: 192.0.2.10 2001:db8::10 fe80::1\n"},
		{"nothing to do reads nothing and writes nothing",
			ips("192.0.2.10", "2001:db8::10", "198.51.100.7"), false, nil, 0, 0,
			"eth0: 198.51.100.7\nlbd0: 192.0.2.10 2001:db8::10 fe80::1\n"},
		{"a VIP removed from the configuration is unbound",
			ips("192.0.2.10"), false, nil, 0, 1,
			"eth0: 198.51.100.7\nlbd0: 192.0.2.10 fe80::1\n"},
		{"a deleted address is repaired by the next full sync",
			ips("192.0.2.10"), true, func() { delete(k.Links["lbd0"], netip.MustParseAddr("192.0.2.10")) }, 1, 1,
			"eth0: 198.51.100.7\nlbd0: 192.0.2.10 fe80::1\n"},
	}
	for _, s := range steps {
		if s.drift != nil {
			s.drift()
		}
		st, err := a.Apply(s.vips, s.full)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if st.Dumps != s.dumps || st.Writes != s.writes {
			t.Errorf("%s: %+v; want %d dumps, %d writes", s.name, st, s.dumps, s.writes)
		}
		if got := k.String(); got != s.want {
			t.Errorf("%s:\n%s\nwant:\n%s", s.name, got, s.want)
		}
	}
	if got := a.Elsewhere(ips("198.51.100.7", "192.0.2.10")); len(got) != 1 || got[netip.MustParseAddr("198.51.100.7")] != "eth0" {
		t.Errorf("Elsewhere = %v", got)
	}
}
