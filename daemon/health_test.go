package daemon

import (
	"errors"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/dataplane/ipvs/fakeipvs"
	"github.com/lbdproject/lbd/dataplane/ownership"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/lvs"
)

var (
	vsWeb     = lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	vsAPI     = lvs.Key{Addr: netip.MustParseAddr("192.0.2.11"), Port: 80, Protocol: lvs.TCP}
	vsForeign = lvs.Key{Addr: netip.MustParseAddr("192.0.2.99"), Port: 80, Protocol: lvs.TCP}
	rsA       = netip.MustParseAddrPort("10.0.0.1:80")
	rsB       = netip.MustParseAddrPort("10.0.0.2:80")
	rsC       = netip.MustParseAddrPort("10.0.0.3:80")
)

func svc(k lvs.Key, dests ...ipvs.Dest) ipvs.Service {
	return ipvs.Service{Key: k, Scheduler: "wrr", Dests: dests}
}

func TestKernelSeed(t *testing.T) {
	tests := []struct {
		name  string
		dump  []ipvs.Service
		owned map[lvs.Key]bool
		want  healthcheck.Seed
	}{
		{
			name: "empty kernel",
			want: healthcheck.Seed{},
		},
		{
			name:  "served and held",
			dump:  []ipvs.Service{svc(vsWeb, ipvs.Dest{Addr: rsA, Weight: 3}, ipvs.Dest{Addr: rsB, Weight: 0})},
			owned: map[lvs.Key]bool{vsWeb: true},
			want:  healthcheck.Seed{rsA: healthcheck.SeedServed, rsB: healthcheck.SeedHeld},
		},
		{
			name:  "served in one owned virtual server wins over held in another, in either order",
			dump:  []ipvs.Service{svc(vsWeb, ipvs.Dest{Addr: rsA, Weight: 0}, ipvs.Dest{Addr: rsB, Weight: 1}), svc(vsAPI, ipvs.Dest{Addr: rsA, Weight: 1}, ipvs.Dest{Addr: rsB, Weight: 0})},
			owned: map[lvs.Key]bool{vsWeb: true, vsAPI: true},
			want:  healthcheck.Seed{rsA: healthcheck.SeedServed, rsB: healthcheck.SeedServed},
		},
		{
			// Another tool's virtual server says nothing of lbd's checks.
			name: "virtual servers lbd does not own are ignored",
			dump: []ipvs.Service{
				svc(vsWeb, ipvs.Dest{Addr: rsA, Weight: 0}),
				svc(vsForeign, ipvs.Dest{Addr: rsA, Weight: 5}, ipvs.Dest{Addr: rsC, Weight: 5}),
			},
			owned: map[lvs.Key]bool{vsWeb: true},
			want:  healthcheck.Seed{rsA: healthcheck.SeedHeld},
		},
		{
			name:  "nothing owned",
			dump:  []ipvs.Service{svc(vsForeign, ipvs.Dest{Addr: rsA, Weight: 5})},
			owned: map[lvs.Key]bool{},
			want:  healthcheck.Seed{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := kernelSeed(slices.DeleteFunc(tt.dump, func(s ipvs.Service) bool { return !tt.owned[s.Key] }))
			if got == nil || !maps.Equal(got, tt.want) {
				t.Errorf("seed %v, want %v", got, tt.want)
			}
		})
	}
}

// failingLedger cannot be read.
type failingLedger struct{ *fakeipvs.Ledger }

func (failingLedger) Owned() (map[lvs.Key]bool, error) { return nil, errors.New("bad json") }

func TestReadSeed(t *testing.T) {
	k := &fakeipvs.Kernel{}
	for _, s := range []ipvs.Service{svc(vsWeb, ipvs.Dest{Addr: rsA, Weight: 1}, ipvs.Dest{Addr: rsB}), svc(vsForeign, ipvs.Dest{Addr: rsC, Weight: 1})} {
		if err := k.AddService(s); err != nil {
			t.Fatal(err)
		}
		for _, d := range s.Dests {
			if err := k.AddDest(s.Key, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	owned, err := ownership.Read(k, &fakeipvs.Ledger{Keys: map[lvs.Key]bool{vsWeb: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kernelSeed(owned), (healthcheck.Seed{rsA: healthcheck.SeedServed, rsB: healthcheck.SeedHeld}); !maps.Equal(got, want) {
		t.Errorf("seed %v, want %v", got, want)
	}
	if _, err := ownership.Read(k, failingLedger{}); err == nil || !strings.Contains(err.Error(), "reading owned IPVS services: bad json") {
		t.Errorf("error %v, want the ledger's, with context", err)
	}
}
