//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// Generous limits: under QEMU's emulator everything is several times slower.
const (
	settleLimit    = 60 * time.Second
	requestTimeout = 10 * time.Second
)

// TestHarnessIPVSNATByHand proves the harness itself: the topology carries
// traffic, and an IPVS NAT service configured by hand with ipvsadm on the
// director balances HTTP and UDP over two real servers, which see the
// client's own address.
func TestHarnessIPVSNATByHand(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	client := tp.ClientHosts[0]

	t.Run("real servers answer the director directly", func(t *testing.T) {
		for _, rs := range tp.RealServers {
			target := netip.AddrPortFrom(rs.Addr(tp.Backend), topo.BackendHTTPPort)
			answers, err := dir.Probe(topo.HTTP, target, 1, requestTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if got := answers.ByServer()[rs.Host]; got != 1 {
				t.Fatalf("%s: want one answer from %s, got %+v", target, rs.Host, answers)
			}
		}
	})

	vip := topo.VIP(1)
	httpVS := netip.AddrPortFrom(vip, 80)
	udpVS := netip.AddrPortFrom(vip, 53)
	dir.AddVIP(t, vip)
	dir.MustExec(t, "ipvsadm", "-A", "-t", httpVS.String(), "-s", "rr")
	dir.MustExec(t, "ipvsadm", "-A", "-u", udpVS.String(), "-s", "rr")
	for _, rs := range tp.RealServers {
		rip := rs.Addr(tp.Backend)
		dir.MustExec(t, "ipvsadm", "-a", "-t", httpVS.String(), "-r",
			netip.AddrPortFrom(rip, topo.BackendHTTPPort).String(), "-m")
		dir.MustExec(t, "ipvsadm", "-a", "-u", udpVS.String(), "-r",
			netip.AddrPortFrom(rip, topo.BackendUDPPort).String(), "-m")
	}

	t.Run("ipvsadm -Sn lists the services as configured", func(t *testing.T) {
		want := []string{
			fmt.Sprintf("-A -t %s -s rr", httpVS),
			fmt.Sprintf("-A -u %s -s rr", udpVS),
		}
		for _, rs := range tp.RealServers {
			rip := rs.Addr(tp.Backend)
			want = append(want,
				fmt.Sprintf("-a -t %s -r %s -m -w 1", httpVS, netip.AddrPortFrom(rip, topo.BackendHTTPPort)),
				fmt.Sprintf("-a -u %s -r %s -m -w 1", udpVS, netip.AddrPortFrom(rip, topo.BackendUDPPort)))
		}
		got := ipvsadmSave(t, dir)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("ipvsadm -Sn:\ngot:\n  %s\nwant:\n  %s",
				strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	})

	for _, c := range []struct {
		proto  topo.Proto
		target netip.AddrPort
	}{
		{topo.HTTP, httpVS},
		{topo.UDP, udpVS},
	} {
		t.Run(fmt.Sprintf("%s through the VIP reaches both real servers", c.proto), func(t *testing.T) {
			poll.Until(t, fmt.Sprintf("%s %s to answer", c.proto, c.target), settleLimit, func() error {
				answers, err := client.Probe(c.proto, c.target, 1, requestTimeout)
				if err != nil {
					return err
				}
				if errs := answers.Errors(); len(errs) > 0 {
					return fmt.Errorf("%s", errs[0])
				}
				return nil
			})

			const requests = 20
			answers, err := client.Probe(c.proto, c.target, requests, requestTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if errs := answers.Errors(); len(errs) > 0 {
				t.Fatalf("%d of %d requests failed, first: %s", len(errs), requests, errs[0])
			}
			perServer := answers.ByServer()
			t.Logf("answers per real server: %v", perServer)
			for _, rs := range tp.RealServers {
				if perServer[rs.Host] == 0 {
					t.Errorf("%s never answered; answers per server: %v", rs.Host, perServer)
				}
			}
			// NAT rewrites only the destination: the real servers see the client.
			for _, a := range answers {
				if want := client.Addr(tp.Clients); a.Client != want {
					t.Fatalf("%s saw client %s, want %s", a.Server, a.Client, want)
				}
			}
		})
	}
}

// ipvsadmSave returns the director's `ipvsadm -Sn` lines, sorted.
func ipvsadmSave(t *testing.T, d *topo.Director) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(d.MustExec(t, "ipvsadm", "-Sn"), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}
