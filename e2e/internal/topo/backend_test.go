package topo

import (
	"net/netip"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseProbeOutputCountsAnswersPerServer(t *testing.T) {
	out := "answer id=rs1 client=198.18.1.11:40000\n" +
		"error dial tcp 198.18.100.1:80: i/o timeout\n" +
		"answer id=rs2 client=198.18.1.11:40002\n" +
		"answer id=rs1 client=198.18.1.11:40004\n"
	as, err := parseProbeOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := as.ByServer(), map[string]int{"rs1": 2, "rs2": 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("ByServer() = %v, want %v", got, want)
	}
	if got := as.Errors(); len(got) != 1 || got[0] != "dial tcp 198.18.100.1:80: i/o timeout" {
		t.Errorf("Errors() = %q", got)
	}
	if want := netip.MustParseAddr("198.18.1.11"); as[0].Client != want {
		t.Errorf("client = %v, want %v", as[0].Client, want)
	}
}

func TestParseProbeOutputRejectsGarbage(t *testing.T) {
	for _, out := range []string{"hello", "answer client=1.2.3.4:5", "answer id=rs1 client=nonsense"} {
		if _, err := parseProbeOutput(out); err == nil {
			t.Errorf("parseProbeOutput(%q): no error", out)
		}
	}
}

func TestVIPAndHostAddresses(t *testing.T) {
	if got := VIP(1).String(); got != "198.18.100.1" {
		t.Errorf("VIP(1) = %s", got)
	}
	if got := hostAddr(BackendPrefix, hostBase).String(); got != "198.18.3.11" {
		t.Errorf("first real server address = %s", got)
	}
}

// TestSockaddrAddrPort: an SCTP backend listens on an IPv6 socket that
// takes IPv4 too; the client it reports is IPv4 for an IPv4 peer.
func TestSockaddrAddrPort(t *testing.T) {
	for _, tc := range []struct {
		sa   unix.Sockaddr
		want string
	}{
		{&unix.SockaddrInet4{Addr: [4]byte{198, 18, 1, 11}, Port: 40000}, "198.18.1.11:40000"},
		{&unix.SockaddrInet6{Addr: netip.MustParseAddr("::ffff:198.18.2.1").As16(), Port: 2905}, "198.18.2.1:2905"},
		{&unix.SockaddrInet6{Addr: netip.MustParseAddr("2001:2:0:1::11").As16(), Port: 2905}, "[2001:2:0:1::11]:2905"},
	} {
		if got := sockaddrAddrPort(tc.sa).String(); got != tc.want {
			t.Errorf("sockaddrAddrPort(%+v) = %s, want %s", tc.sa, got, tc.want)
		}
	}
}
