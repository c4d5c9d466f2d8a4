package ipvs_test

import (
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
)

// withForward returns s with every destination forwarded by f.
func withForward(s desired.Service, f lvs.Forward) desired.Service {
	s.Dests = append([]desired.Dest(nil), s.Dests...)
	for i := range s.Dests {
		d := &s.Dests[i]
		d.Real = &config.RealServer{Address: d.Addr.Addr(), Port: d.Addr.Port(), Weight: d.Weight, Forward: f}
	}
	return s
}

// TestForwardAndFWMark applies destinations with every forwarding method,
// in address and firewall-mark virtual servers: a changed method is one
// write per destination, and a full reconcile repairs one changed behind
// lbd's back.
func TestForwardAndFWMark(t *testing.T) {
	dr := lvs.Forward{Method: lvs.DR}
	gue := lvs.Forward{Method: lvs.Tunnel, Tunnel: lvs.GUE, Port: 6080}
	mark := lvs.FWMarkKey(7, lvs.IPv4)
	for _, k := range kernels {
		t.Run(k.name, func(t *testing.T) {
			f := fixtureFor(k.batch)
			want := []desired.Service{withForward(svc(web, "rr", rs1, 1, rs2, 1), dr), withForward(svc(mark, "rr", rs3, 1), gue)}
			f.apply(t, false, want...)
			f.expect(t, `
192.0.2.10:80/tcp rr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=1 dr
  -> 10.0.0.2:80 w=1 dr
fwmark:7/ipv4 rr flags=0x0 timeout=0
  -> 10.0.0.3:80 w=1 gue:6080
`)
			// Back to NAT: one write per destination, no dump.
			res := f.apply(t, false, svc(web, "rr", rs1, 1, rs2, 1), want[1])
			if res.Writes != 2 || res.Dumps != 0 {
				t.Errorf("method change: %+v; want 2 writes, no dump", res.Stats)
			}
			// Drift: the kernel's method changed behind lbd's back.
			if err := f.k.UpdateDest(web, ipvs.Dest{Addr: rs1, Weight: 1, Forward: dr}); err != nil {
				t.Fatal(err)
			}
			res = f.apply(t, true, svc(web, "rr", rs1, 1, rs2, 1), want[1])
			if res.Writes != 1 {
				t.Errorf("full reconcile after drift: %+v; want 1 write", res.Stats)
			}
			f.expect(t, `
192.0.2.10:80/tcp rr flags=0x0 timeout=0
  -> 10.0.0.1:80 w=1
  -> 10.0.0.2:80 w=1
fwmark:7/ipv4 rr flags=0x0 timeout=0
  -> 10.0.0.3:80 w=1 gue:6080
`)
		})
	}
}
