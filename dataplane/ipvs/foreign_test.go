package ipvs_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/lvs"
)

const theirs = `192.0.2.10:80/tcp sh flags=0x0 timeout=0
  -> 10.0.0.3:80 w=7
`

// addTheirs puts someone else's virtual server at web in the kernel.
func addTheirs(t *testing.T, k *fakeipvs.Kernel) {
	t.Helper()
	if err := k.AddService(ipvs.Service{Key: web, Scheduler: "sh"}); err != nil {
		t.Fatal(err)
	}
	if err := k.AddDest(web, ipvs.Dest{Addr: rs3, Weight: 7}); err != nil {
		t.Fatal(err)
	}
}

// applyForeign applies want and checks that the only error is web's
// foreign conflict, reported in Failed.
func applyForeign(t *testing.T, a *ipvs.Applier, full bool, want ...desired.Service) {
	t.Helper()
	res, err := a.Apply(want, full)
	var fe *ipvs.ForeignError
	if !errors.As(err, &fe) || fe.Service.Key != web || !errors.As(err, new(ipvs.Refused)) {
		t.Fatalf("Apply: %v; want web's foreign conflict, as a refusal", err)
	}
	if len(res.Failed) != 1 || res.Failed[0] != web {
		t.Errorf("Failed = %v; want [web]", res.Failed)
	}
	if msg := err.Error(); !strings.Contains(msg, "ipvsadm -D -t 192.0.2.10:80") || !strings.Contains(msg, "adopt = true") {
		t.Errorf("the error does not say what to do: %s", msg)
	}
}

// A virtual server lbd did not create is never adopted, rewritten or
// deleted, whether lbd finds it in a dump or by adding at its key; the
// rest is synced. Without it, lbd creates its own.
func TestForeignVirtualServers(t *testing.T) {
	tests := []struct {
		name  string
		batch bool
		// before: theirs is there before lbd's first sync (found in the
		// dump); else it appears after it, and lbd meets it when adding.
		before bool
	}{
		{"in the dump", false, true},
		{"in the dump, batch kernel", true, true},
		{"found when adding", false, false},
		{"found when adding, batch kernel", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, l := &fakeipvs.Kernel{}, &fakeipvs.Ledger{}
			var kernel ipvs.Kernel = k
			if tt.batch {
				kernel = fakeipvs.BatchKernel{Kernel: k}
			}
			a := ipvs.New(kernel, l)
			mine := svc(dns, "rr", rs1, 1)
			if tt.before {
				addTheirs(t, k)
			} else {
				if _, err := a.Apply([]desired.Service{mine}, false); err != nil {
					t.Fatal(err)
				}
				addTheirs(t, k)
			}
			want := []desired.Service{svc(web, "wrr", rs1, 3), mine}
			applyForeign(t, a, false, want...)
			applyForeign(t, a, false, want...) // a requested sync
			applyForeign(t, a, true, want...)  // a full reconcile
			if !strings.HasPrefix(k.String(), theirs) || !strings.Contains(k.String(), "192.0.2.53:53/udp rr") {
				t.Errorf("kernel:\n%s\nwant theirs untouched and lbd's dns", k)
			}
			if l.Keys[web] || !l.Keys[dns] {
				t.Errorf("ledger %v; want dns only", l.Keys)
			}
			// Released: theirs stays.
			if _, err := a.Apply([]desired.Service{mine}, true); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(k.String(), theirs) {
				t.Errorf("releasing the claim touched theirs:\n%s", k)
			}
			// Gone (the admin deleted it): lbd creates its own.
			if err := k.DeleteService(web); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Apply(want, true); err != nil {
				t.Fatalf("after theirs went: %v", err)
			}
			if !strings.HasPrefix(k.String(), "192.0.2.10:80/tcp wrr") || !l.Keys[web] {
				t.Errorf("kernel:\n%s\nledger %v; want lbd's own web", k, l.Keys)
			}
		})
	}
}

// Adoption is explicit: the service's adopt, or AdoptAddrs (the VIPs on
// lbd's own interface after an unreadable ledger).
func TestAdoption(t *testing.T) {
	tests := []struct {
		name  string
		adopt bool
		addrs map[netip.Addr]bool
		want  bool
	}{
		{"adopt = true", true, nil, true},
		{"on lbd's interface", false, map[netip.Addr]bool{web.Addr: true}, true},
		{"another address on lbd's interface", false, map[netip.Addr]bool{dns.Addr: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, l := &fakeipvs.Kernel{}, &fakeipvs.Ledger{}
			addTheirs(t, k)
			a := ipvs.New(k, l)
			a.AdoptAddrs(tt.addrs)
			s := svc(web, "wrr", rs1, 3)
			s.Adopt = tt.adopt
			_, err := a.Apply([]desired.Service{s}, false)
			if got := err == nil && l.Keys[web]; got != tt.want {
				t.Fatalf("adopted = %v (error %v, ledger %v); want %v", got, err, l.Keys, tt.want)
			}
			if !tt.want {
				return
			}
			if got := k.String(); got != "192.0.2.10:80/tcp wrr flags=0x0 timeout=0\n  -> 10.0.0.1:80 w=3\n  -> 10.0.0.3:80 w=0\n" {
				t.Errorf("adopted, the kernel holds:\n%s", got)
			}
		})
	}
	_ = lvs.TCP
}
