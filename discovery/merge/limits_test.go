package merge

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/discovery/consul"
)

func TestCaps(t *testing.T) {
	cfg := load(t, base)
	web := Queries(cfg)[0].Key()
	meta := func(vip string, port int) map[string]string {
		return map[string]string{"lbd-vip": vip, "lbd-port": fmt.Sprint(port)}
	}
	addr := func(i int) string { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String() }
	// Newest first: the cap keeps the oldest registrations whatever the
	// order they come in.
	var many []consul.Instance
	for i := maxInstances + 5; i > 0; i-- {
		many = append(many, inst(fmt.Sprint(i), addr(i), 80, consul.Passing, uint64(i), nil))
	}
	services := map[string][]consul.Instance{}
	for i := range maxServices + 3 {
		name := fmt.Sprintf("s%05d", i)
		services[name] = []consul.Instance{inst(name, "10.2.0.1", 80, consul.Passing, uint64(i+1), meta("198.51.100.1", i+1), "lbd")}
	}
	vips := make([]string, maxVIPs+1)
	for i := range vips {
		vips[i] = fmt.Sprintf("198.51.100.%d", i+1)
	}
	tests := []struct {
		name     string
		snap     consul.Snapshot
		check    func(r Result) string // what is wrong with r, "" if nothing
		problems string
	}{
		{"instances per service", consul.Snapshot{Services: map[string][]consul.Instance{web: many}}, func(r Result) string {
			rs := r.Reals["web"]
			if len(rs) != maxInstances || rs[len(rs)-1].Address.String() != addr(maxInstances) {
				return fmt.Sprintf("%d reals, the last %v; want the %d oldest", len(rs), rs[len(rs)-1].Address, maxInstances)
			}
			return ""
		}, `consul service "web-app": more than 1024 usable instances; the 1024 oldest registrations serve, the newer ones are refused`},
		{"Consul-defined services", consul.Snapshot{Tagged: services}, func(r Result) string {
			if len(r.Services) != maxServices || r.Services[maxServices-1].Name != fmt.Sprintf("s%05d", maxServices-1) {
				return fmt.Sprintf("%d services; want the %d oldest", len(r.Services), maxServices)
			}
			return ""
		}, `consul virtual services: more than 4096 Consul services carry tag "lbd"; the 4096 oldest registrations define services, the newer ones (from "s04096" on) are refused`},
		{"VIPs per registration", consul.Snapshot{Tagged: map[string][]consul.Instance{"wide": {
			inst("w", "10.2.0.1", 80, consul.Passing, 1, meta(strings.Join(vips, ","), 80), "lbd")}}}, func(r Result) string {
			if len(r.Services) != 0 {
				return fmt.Sprintf("services %v; want none", r.Services)
			}
			return ""
		}, `consul service "wide": meta lbd-vip lists 17 VIPs; one registration may claim at most 16`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Compute(Input{Config: cfg, Snapshot: tt.snap})
			if msg := tt.check(r); msg != "" {
				t.Error(msg)
			}
			if got := problems(r.Problems); got != tt.problems {
				t.Errorf("problems:\n%s\nwant:\n%s", got, tt.problems)
			}
		})
	}
}

func TestSafely(t *testing.T) {
	tests := []struct {
		name   string
		f      func()
		ok     bool
		prefix string
	}{
		{"returns", func() {}, true, ""},
		{"panics", func() { panic("index out of range") }, false, "lbd failed on this registration (panic: index out of range); it is ignored"},
		{"panics with a huge value", func() { panic(strings.Repeat("x", 5000)) }, false, "lbd failed on this registration (panic: " + strings.Repeat("x", 200) + "…(5000 bytes))"},
		{"panics with an error", func() { var m map[string]int; m["a"]++ }, false, "lbd failed on this registration (panic: assignment to entry in nil map)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Result
			ok := r.safely(`consul service "x"`, tt.f)
			switch {
			case ok != tt.ok:
				t.Errorf("safely = %v, want %v", ok, tt.ok)
			case tt.ok && len(r.Problems) != 0:
				t.Errorf("problems %v, want none", r.Problems)
			case !tt.ok && (len(r.Problems) != 1 || !strings.HasPrefix(r.Problems[0].Msg, tt.prefix) || r.Problems[0].Subject != `consul service "x"`):
				t.Errorf("problems %v, want one starting %q", r.Problems, tt.prefix)
			}
		})
	}
}

// TestQuotedValues: what Consul's registrations name is truncated in
// Problems, which are logged and shown by lbd status.
func TestQuotedValues(t *testing.T) {
	cfg := load(t, base)
	long := strings.Repeat("n", 5000)
	in := inst(long, "127.0.0.1", 80, consul.Passing, 1, map[string]string{"lbd-weight": strings.Repeat("9", 600)})
	in.Node = long
	r := Compute(Input{Config: cfg, Snapshot: consul.Snapshot{Services: map[string][]consul.Instance{Queries(cfg)[0].Key(): {in}},
		Tagged: map[string][]consul.Instance{long: {inst("a", "10.0.0.1", 80, consul.Passing, 1, map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-scheduler": long}, "lbd")}}}})
	if len(r.Problems) < 2 {
		t.Fatalf("problems %v; want the loopback instance and the bad scheduler", r.Problems)
	}
	for _, p := range r.Problems {
		if len(p.String()) > 600 || !strings.Contains(p.String(), "…(5000 bytes)") {
			t.Errorf("problem of %d bytes, want values cut to %d bytes: %.300s", len(p.String()), consul.MaxQuoted, p)
		}
	}
}
