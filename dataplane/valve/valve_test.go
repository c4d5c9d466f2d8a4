package valve

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

func parse(t *testing.T, text string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(text)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// web has four configured real servers, removed when unhealthy; api one,
// plus what Consul finds; max_delete_fraction is the default 0.5.
const base = `
[[service]]
name = "web"
vips = ["198.18.0.10"]
port = 80
on_unhealthy = "remove"
real_server = [{ address = "198.18.1.1" }, { address = "198.18.1.2" }, { address = "198.18.1.3" }, { address = "198.18.1.4" }]
[[service]]
name = "api"
vips = ["198.18.0.20"]
port = 80
real_server = [{ address = "198.18.2.1" }]
[service.consul]
service = "api"
`

// step is one sync as the valve sees it.
type step struct {
	name           string
	cfg            string // configuration text; "" keeps the previous one
	edition        string
	down           []string          // web's real servers failing their checks
	consul         int               // how many real servers Consul gives api
	restart        []desired.Service // a restart baseline set before this step
	restartEdition string
	// What the decision must be.
	wantHold    Hold
	wantWebKept int // real servers web has in the decided state
	wantAPI     int // real servers api has in the decided state
}

func TestDecide(t *testing.T) {
	webKey := lvs.Key{Addr: netip.MustParseAddr("198.18.0.10"), Port: 80, Protocol: lvs.TCP}
	apiKey := lvs.Key{Addr: netip.MustParseAddr("198.18.0.20"), Port: 80, Protocol: lvs.TCP}
	rs := func(prefix string, n int) []desired.Dest {
		var out []desired.Dest
		for i := 1; i <= n; i++ {
			out = append(out, desired.Dest{Addr: netip.MustParseAddrPort(fmt.Sprintf("%s.%d:80", prefix, i)), Weight: 1})
		}
		return out
	}
	kernel := []desired.Service{{Key: webKey, Dests: rs("198.18.1", 4)}, {Key: apiKey, Dests: rs("198.18.2", 8)}}
	held := func(what Measure, gone, of int, against Base) Hold {
		return Hold{What: what, Gone: gone, Of: of, MaxFraction: 0.5, Against: against}
	}
	otherEdit := base + "[[service]]\nname = \"db\"\nvips = [\"198.18.0.30\"]\nport = 5432\n"
	apiEdit := strings.Replace(base, "[service.consul]\nservice = \"api\"\n", "", 1)
	tests := []struct {
		name  string
		steps []step
	}{
		{"health removing most is held; little is not; the admin's edit is obeyed", []step{
			{name: "first", cfg: base, edition: "a", consul: 2, wantWebKept: 4, wantAPI: 3},
			{name: "3 of 7 down", down: []string{"1", "2", "3"}, consul: 2, wantWebKept: 1, wantAPI: 3},
			{name: "the last of web down", down: []string{"1", "2", "3", "4"}, consul: 2, wantWebKept: 0, wantAPI: 3},
			{name: "Consul empty too: 2 of 3 gone", down: []string{"1", "2", "3", "4"}, wantHold: held(RealServers, 2, 3, Applied), wantWebKept: 0, wantAPI: 3},
		}},
		{"while a hold lasts, additions do not dilute it", []step{
			{name: "first", cfg: base, edition: "a", consul: 0, wantWebKept: 4, wantAPI: 1},
			{name: "web all down", down: []string{"1", "2", "3", "4"}, wantHold: held(RealServers, 4, 5, Applied), wantWebKept: 4, wantAPI: 1},
			{name: "Consul adds 6", down: []string{"1", "2", "3", "4"}, consul: 6, wantHold: held(RealServers, 4, 5, HoldStart), wantWebKept: 4, wantAPI: 7},
			{name: "web back", consul: 6, wantWebKept: 4, wantAPI: 7},
		}},
		{"an edit of another service keeps the hold; one of the service releases it", []step{
			{name: "first", cfg: base, edition: "a", consul: 6, wantWebKept: 4, wantAPI: 7},
			{name: "Consul empty", wantHold: held(RealServers, 6, 11, Applied), wantWebKept: 4, wantAPI: 7},
			{name: "edit of another service", cfg: otherEdit, edition: "b", wantHold: held(RealServers, 6, 11, Edit), wantWebKept: 4, wantAPI: 7},
			{name: "edit of api", cfg: apiEdit, edition: "c", wantWebKept: 4, wantAPI: 1},
		}},
		{"virtual servers going are counted first", []step{
			{name: "first", cfg: base + "[[service]]\nname = \"db\"\nvips = [\"198.18.0.30\", \"198.18.0.31\", \"198.18.0.32\"]\nport = 5432\n", edition: "a", wantWebKept: 4, wantAPI: 1},
			{name: "the same edition without them (no edit)", cfg: base, edition: "a", wantHold: held(VirtualServers, 3, 5, Applied), wantWebKept: 4, wantAPI: 1},
		}},
		{"after a restart over unchanged files, the kernel is the measure", []step{
			{name: "first: Consul answers short", cfg: base, edition: "a", restart: kernel, restartEdition: "a",
				wantHold: held(RealServers, 7, 12, Restart), wantWebKept: 4, wantAPI: 8},
		}},
		{"after a restart over edited files, the edit is the admin's", []step{
			{name: "first", cfg: base, edition: "b", restart: kernel, restartEdition: "a", wantWebKept: 4, wantAPI: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v Valve
			var cfg *config.Config
			var edition string
			for _, s := range tt.steps {
				if s.cfg != "" {
					cfg, edition = parse(t, s.cfg), s.edition
				}
				if s.restart != nil {
					v.SetRestartBaseline(s.restartEdition, s.restart)
				}
				in := desired.Input{Config: cfg, Discovered: map[string][]config.RealServer{"api": consulReals(s.consul)}, Health: down(s.down)}
				dec := v.Decide(desired.Compute(in), Input{Sources: in, Edition: edition})
				if dec.Hold != s.wantHold {
					t.Errorf("%s: hold %+v (%s), want %+v", s.name, dec.Hold, dec.Hold, s.wantHold)
				}
				if web, api := dests(dec.State, webKey), dests(dec.State, apiKey); web != s.wantWebKept || api != s.wantAPI {
					t.Errorf("%s: web has %d real servers, api %d; want %d and %d", s.name, web, api, s.wantWebKept, s.wantAPI)
				}
				st := dec.State
				v.Applied(&st, Input{Sources: in, Edition: edition})
			}
		})
	}
}

func consulReals(n int) []config.RealServer {
	var out []config.RealServer
	for i := 1; i <= n; i++ {
		out = append(out, config.RealServer{Address: netip.AddrFrom4([4]byte{198, 18, 2, byte(1 + i)}), Port: 80, Weight: 1,
			HealthCheck: &config.HealthCheck{Type: config.CheckNone}, Pos: config.Pos{File: "consul"}})
	}
	return out
}

func down(lasts []string) map[lvs.HealthKey]bool {
	h := map[lvs.HealthKey]bool{}
	for _, l := range lasts {
		h[lvs.HealthKey{Service: "web", Addr: netip.MustParseAddrPort("198.18.1." + l + ":80")}] = false
	}
	return h
}

func dests(st desired.State, k lvs.Key) int {
	i := slices.IndexFunc(st.Services, func(s desired.Service) bool { return s.Key == k })
	if i < 0 {
		return -1
	}
	return len(st.Services[i].Dests)
}

func TestHoldString(t *testing.T) {
	if got := (Hold{}).String(); got != "" {
		t.Errorf("zero hold: %q", got)
	}
	h := Hold{What: RealServers, Gone: 3, Of: 5, MaxFraction: 0.5, Against: Applied}
	if want := "would delete 3 of 5 real servers at once (max_delete_fraction 0.5) without a configuration edit"; h.String() != want {
		t.Errorf("%q, want %q", h.String(), want)
	}
}
