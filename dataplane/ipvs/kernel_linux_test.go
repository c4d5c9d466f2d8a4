package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	mobyipvs "github.com/moby/ipvs"

	"github.com/lbdproject/lbd/lvs"
)

func TestAvailable(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "ip_vs")
	if err := os.WriteFile(present, []byte("IP Virtual Server version 1.2.1 (size=4096)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		path    string
		wantErr bool
	}{
		{"loaded", present, false},
		{"not loaded", filepath.Join(dir, "missing"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := available(tc.path)
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("available(%q) = %v, want nil", tc.path, err)
				}
				return
			}
			if !errors.Is(err, ErrNoIPVS) {
				t.Fatalf("available(%q) = %v, want it to wrap ErrNoIPVS", tc.path, err)
			}
			// The operator must learn which module to load and what was
			// looked at.
			for _, want := range []string{"modprobe ip_vs", tc.path} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestSchedulerError(t *testing.T) {
	enoent := fmt.Errorf("netlink: %w", syscall.ENOENT) // wrapped, as a caller may
	for _, tc := range []struct {
		name  string
		sched string
		err   error
		want  string // "" : err comes back unchanged
	}{
		{"mh missing", "mh", syscall.ENOENT,
			`scheduler "mh" is not available in the kernel: load module ip_vs_mh (modprobe ip_vs_mh): no such file or directory`},
		{"wrr missing", "wrr", syscall.ENOENT,
			`scheduler "wrr" is not available in the kernel: load module ip_vs_wrr (modprobe ip_vs_wrr): no such file or directory`},
		{"wrapped ENOENT", "sh", enoent,
			`scheduler "sh" is not available in the kernel: load module ip_vs_sh (modprobe ip_vs_sh): netlink: no such file or directory`},
		{"no error", "mh", nil, ""},
		{"exists", "mh", syscall.EEXIST, ""},
		{"no such service", "rr", syscall.ESRCH, ""},
		{"no scheduler name", "", syscall.ENOENT, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := schedulerError(tc.sched, tc.err)
			if tc.want == "" {
				if got != tc.err {
					t.Fatalf("schedulerError(%q, %v) = %v, want the error unchanged", tc.sched, tc.err, got)
				}
				return
			}
			if got == nil || got.Error() != tc.want {
				t.Fatalf("schedulerError(%q, %v) = %v\nwant %s", tc.sched, tc.err, got, tc.want)
			}
			if !errors.Is(got, syscall.ENOENT) {
				t.Errorf("errors.Is(%v, ENOENT) = false", got)
			}
		})
	}
}

// TestMobyKeyRoundTrip converts keys to moby/ipvs services and back, as
// a write and the next dump do.
func TestMobyKeyRoundTrip(t *testing.T) {
	for _, k := range []lvs.Key{
		{Addr: netip.MustParseAddr("198.18.0.1"), Port: 80, Protocol: lvs.TCP},
		{Addr: netip.MustParseAddr("2001:2::1"), Port: 53, Protocol: lvs.UDP},
		{Addr: netip.MustParseAddr("198.18.0.1"), Port: 2905, Protocol: lvs.SCTP},
		{Addr: netip.MustParseAddr("2001:2::1"), Port: 3868, Protocol: lvs.SCTP},
		lvs.FWMarkKey(7, lvs.IPv4),
		lvs.FWMarkKey(8, lvs.IPv6),
	} {
		m := keyService(k)
		if k.IsFWMark() {
			// What the kernel dumps for a firewall-mark service: no
			// address, port or protocol.
			m = &mobyipvs.Service{FWMark: m.FWMark, AddressFamily: m.AddressFamily}
		}
		got, err := keyOf(m)
		if err != nil || got != k {
			t.Errorf("%v → %+v → %v, %v", k, m, got, err)
		}
	}
}

// TestKeyOfProtocols reads the virtual servers the kernel dumps: each
// protocol lbd serves by its number, SCTP (132) among them; another
// protocol as a key no service of lbd's has.
func TestKeyOfProtocols(t *testing.T) {
	for _, tc := range []struct {
		proto uint16
		want  lvs.Protocol
	}{
		{syscall.IPPROTO_TCP, lvs.TCP},
		{syscall.IPPROTO_UDP, lvs.UDP},
		{132, lvs.SCTP},
		{33, "proto-33"},         // DCCP
		{132 + 256, "proto-388"}, // not a protocol number: never SCTP
	} {
		m := &mobyipvs.Service{Address: netip.MustParseAddr("198.18.0.1").AsSlice(), Port: 2905, Protocol: tc.proto, AddressFamily: syscall.AF_INET}
		got, err := keyOf(m)
		want := lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 2905, Protocol: tc.want}
		if err != nil || got != want {
			t.Errorf("protocol %d: keyOf = %v, %v; want %v", tc.proto, got, err, want)
		}
	}
	if got := keyService(lvs.Key{Addr: netip.MustParseAddr("198.18.0.1"), Port: 2905, Protocol: lvs.SCTP}).Protocol; got != 132 {
		t.Errorf("an SCTP key is written with protocol %d; want 132", got)
	}
}
