package addrs_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"syscall"
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

// hidden is a Kernel that cannot mark links (not an Adopter).
type hidden struct{ addrs.Kernel }

func TestOnlyLbdsLinkIsUsed(t *testing.T) {
	mine, theirs := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("203.0.113.1")
	unmarked := func() *fakeaddrs.Kernel {
		return &fakeaddrs.Kernel{
			Links:    map[string]map[netip.Addr]bool{"dummy0": {theirs: true}},
			Unmarked: map[string]bool{"dummy0": true},
		}
	}
	tests := []struct {
		name    string
		k       *fakeaddrs.Kernel
		wrap    func(*fakeaddrs.Kernel) addrs.Kernel
		adopt   bool
		wantErr string // empty: no error
		want    string // the kernel after two full syncs
		adopted bool   // logged as adopted
	}{
		{name: "a missing link is created, lbd's",
			k:    &fakeaddrs.Kernel{},
			want: "dummy0: 192.0.2.10\n"},
		{name: "lbd's own link from an earlier run is used, leftovers unbound",
			k:    &fakeaddrs.Kernel{Links: map[string]map[netip.Addr]bool{"dummy0": {theirs: true}}},
			want: "dummy0: 192.0.2.10\n"},
		{name: "someone else's link is refused and left as it is",
			k:       unmarked(),
			wantErr: "interface dummy0 exists and was not created by lbd: lbd does not touch it. Use another [dataplane] interface, delete the link, or hand it to lbd with `ip link set dummy0 alias 'lbd: ",
			want:    "dummy0: 203.0.113.1\n"},
		{name: "an unmarked link is adopted after an upgrade",
			k:       unmarked(),
			adopt:   true,
			want:    "dummy0: 192.0.2.10\n",
			adopted: true},
		{name: "no adoption by a kernel that cannot mark",
			k:       unmarked(),
			wrap:    func(k *fakeaddrs.Kernel) addrs.Kernel { return hidden{k} },
			adopt:   true,
			wantErr: "was not created by lbd",
			want:    "dummy0: 203.0.113.1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var k addrs.Kernel = tt.k
			if tt.wrap != nil {
				k = tt.wrap(tt.k)
			}
			var log bytes.Buffer
			a := addrs.New(k, "dummy0")
			a.AdoptUnmarked = tt.adopt
			a.Log = slog.New(slog.NewTextHandler(&log, nil))
			for range 2 {
				st, err := a.Apply([]netip.Addr{mine}, true)
				var foreign *addrs.ForeignLinkError
				switch {
				case tt.wantErr == "" && err != nil:
					t.Fatal(err)
				case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.As(err, &foreign)):
					t.Fatalf("error %v; want a ForeignLinkError with %q", err, tt.wantErr)
				case tt.wantErr != "" && (st.Dumps != 0 || st.Writes != 0):
					t.Errorf("refused, yet %+v", st)
				}
			}
			if got := tt.k.String(); got != tt.want {
				t.Errorf("kernel:\n%s\nwant:\n%s", got, tt.want)
			}
			if got := strings.Contains(log.String(), "adopted"); got != tt.adopted {
				t.Errorf("logged %q; adopted: want %v", log.String(), tt.adopted)
			}
			if tt.adopted && tt.k.Unmarked["dummy0"] {
				t.Error("adopted, yet not marked")
			}
		})
	}
}

func TestAdoptionIsForTheFirstSyncOnly(t *testing.T) {
	k := &fakeaddrs.Kernel{}
	a := addrs.New(k, "lbd0")
	a.AdoptUnmarked = true
	if _, err := a.Apply(ips("192.0.2.10"), true); err != nil {
		t.Fatal(err)
	}
	// lbd's link deleted, and another program's created under its name.
	if _, err := k.DeleteLink("lbd0"); err != nil {
		t.Fatal(err)
	}
	k.Links["lbd0"] = map[netip.Addr]bool{netip.MustParseAddr("203.0.113.1"): true}
	k.Unmarked = map[string]bool{"lbd0": true}
	if _, err := a.Apply(ips("192.0.2.10"), true); err == nil || !strings.Contains(err.Error(), "not created by lbd") {
		t.Errorf("error %v; want the link refused", err)
	}
	if got := k.String(); got != "lbd0: 203.0.113.1\n" {
		t.Errorf("kernel:\n%s", got)
	}
	if removed, err := k.DeleteLink("lbd0"); removed || err == nil {
		t.Errorf("cleanup of someone else's link: %v, %v; want it refused", removed, err)
	}
}

// failingAdds refuses every address.
type failingAdds struct{ *fakeaddrs.Kernel }

func (failingAdds) Add(string, netip.Addr) error { return syscall.ENOSPC }

func TestErrorsAreBounded(t *testing.T) {
	a := addrs.New(failingAdds{&fakeaddrs.Kernel{}}, "lbd0")
	var vips []netip.Addr
	for i := range 1000 {
		vips = append(vips, netip.AddrFrom4([4]byte{192, 0, byte(i / 250), byte(1 + i%250)}))
	}
	_, err := a.Apply(vips, true)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if n := strings.Count(msg, "\n") + 1; n != 6 || !strings.Contains(msg, "and 995 more addresses that failed") {
		t.Errorf("error of %d lines, %d bytes:\n%s", n, len(msg), msg)
	}
}

func TestRacesAreNoFailures(t *testing.T) {
	vip, old := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("192.0.2.11")
	k := &fakeaddrs.Kernel{}
	a := addrs.New(k, "lbd0")
	if _, err := a.Apply([]netip.Addr{old}, true); err != nil {
		t.Fatal(err)
	}
	// Between two syncs, someone binds the new VIP and unbinds the old one
	// (an admin's ip addr, a script): what the next sync wanted anyway.
	k.Links["lbd0"] = map[netip.Addr]bool{vip: true}
	st, err := a.Apply([]netip.Addr{vip}, false)
	if err != nil || st.Writes != 2 {
		t.Errorf("%+v, %v; want two writes that found their work done, no error", st, err)
	}
	if got := k.String(); got != "lbd0: 192.0.2.10\n" {
		t.Errorf("kernel:\n%s", got)
	}
	if st, err := a.Apply([]netip.Addr{vip}, false); err != nil || st.Writes != 0 || st.Dumps != 0 {
		t.Errorf("next sync: %+v, %v; want nothing to do", st, err)
	}
}
