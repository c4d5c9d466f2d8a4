package consul

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

func TestQueryKey(t *testing.T) {
	tests := []struct {
		name string
		q    Query
		want string
	}{
		{"service only", Query{Service: "web"}, "web"},
		{"tags sorted and once", Query{Service: "web", Tags: []string{"b", "a", "b"}}, "web?tag=a&tag=b"},
		{"everything", Query{Service: "web", Tags: []string{"x"}, Datacenter: "dc2", PassingOnly: true}, "web?dc=dc2&passing=1&tag=x"},
		{"escaped", Query{Service: "a/b?c", Tags: []string{"&"}}, "a%2Fb%3Fc?tag=%26"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.q.Key(); got != tt.want {
				t.Errorf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
	if a, b := (Query{Service: "web"}).Key(), (Query{Service: "web", PassingOnly: true}).Key(); a == b {
		t.Errorf("queries differing in PassingOnly share the key %q", a)
	}
}

func TestAggregateIsTheWorstCheck(t *testing.T) {
	checks := func(ss ...string) api.HealthChecks {
		var hc api.HealthChecks
		for _, s := range ss {
			hc = append(hc, &api.HealthCheck{Status: s})
		}
		return hc
	}
	tests := []struct {
		name   string
		checks api.HealthChecks
		want   string
	}{
		{"no checks", nil, Passing},
		{"all passing", checks("passing", "passing"), Passing},
		{"node warning", checks("warning", "passing"), Warning},
		{"service critical", checks("passing", "warning", "critical"), Critical},
		{"critical before warning", checks("critical", "warning"), Critical},
		{"maintenance", checks("passing", "maintenance"), Critical},
		{"unknown status", checks("passing", "bogus"), Critical},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := aggregate(tt.checks); got != tt.want {
				t.Errorf("aggregate = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestInstanceOf(t *testing.T) {
	entry := func(svcAddr, nodeAddr string, port int) *api.ServiceEntry {
		return &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: nodeAddr},
			Service: &api.AgentService{ID: "web1", Service: "web", Address: svcAddr, Port: port, CreateIndex: 7},
			Checks:  api.HealthChecks{{Status: "passing"}, {Status: "warning"}},
		}
	}
	tests := []struct {
		name    string
		e       *api.ServiceEntry
		want    netip.AddrPort
		wantErr string
	}{
		{"service address", entry("10.0.0.1", "192.0.2.1", 80), netip.MustParseAddrPort("10.0.0.1:80"), ""},
		{"node address when the service has none", entry("", "192.0.2.1", 80), netip.MustParseAddrPort("192.0.2.1:80"), ""},
		{"IPv6", entry("2001:db8::1", "192.0.2.1", 443), netip.MustParseAddrPort("[2001:db8::1]:443"), ""},
		{"IPv4-mapped IPv6 is IPv4", entry("::ffff:10.0.0.1", "", 80), netip.MustParseAddrPort("10.0.0.1:80"), ""},
		{"no port", entry("10.0.0.1", "", 0), netip.MustParseAddrPort("10.0.0.1:0"), ""},
		{"host name", entry("web.example", "192.0.2.1", 80), netip.AddrPort{}, `instance "web1" on node "n1": service address "web.example" is not an IP address`},
		{"a long host name is cut", entry(strings.Repeat("a", 300), "192.0.2.1", 80), netip.AddrPort{}, `instance "web1" on node "n1": service address "` + strings.Repeat("a", 80) + `"…(300 bytes) is not an IP address`},
		{"node host name", entry("", "node.example", 80), netip.AddrPort{}, `instance "web1" on node "n1": node address "node.example" is not an IP address`},
		{"port out of range", entry("10.0.0.1", "", 70000), netip.AddrPort{}, `instance "web1" on node "n1": port 70000 out of range`},
		{"no node", &api.ServiceEntry{Service: &api.AgentService{}}, netip.AddrPort{}, "incomplete entry in Consul's answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := instanceOf(tt.e)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := netip.AddrPortFrom(in.Address, in.Port); got != tt.want {
				t.Errorf("address = %v, want %v", got, tt.want)
			}
			if in.ID != "web1" || in.Node != "n1" || in.Status != Warning || in.CreateIndex != 7 {
				t.Errorf("instance = %+v, want web1 on n1, warning, create index 7", in)
			}
		})
	}
}

func TestDiffChecksNamesServicesAndNodes(t *testing.T) {
	base := map[checkRef]checkDigest{
		{"n1", "serfHealth"}: {"", "passing"},
		{"n1", "web1"}:       {"web", "passing"},
		{"n2", "db1"}:        {"db", "passing"},
	}
	with := func(f func(m map[checkRef]checkDigest)) map[checkRef]checkDigest {
		m := map[checkRef]checkDigest{}
		for k, v := range base {
			m[k] = v
		}
		f(m)
		return m
	}
	tests := []struct {
		name            string
		new             map[checkRef]checkDigest
		services, nodes string
	}{
		{"nothing", base, "", ""},
		{"service check flips", with(func(m map[checkRef]checkDigest) { m[checkRef{"n1", "web1"}] = checkDigest{"web", "critical"} }), "web", ""},
		{"node check flips", with(func(m map[checkRef]checkDigest) { m[checkRef{"n1", "serfHealth"}] = checkDigest{"", "critical"} }), "", "n1"},
		{"check added", with(func(m map[checkRef]checkDigest) { m[checkRef{"n3", "api1"}] = checkDigest{"api", "passing"} }), "api", ""},
		{"check removed", with(func(m map[checkRef]checkDigest) { delete(m, checkRef{"n2", "db1"}) }), "db", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			services, nodes := diffChecks(base, tt.new)
			if got := joinSet(services); got != tt.services {
				t.Errorf("services = %q, want %q", got, tt.services)
			}
			if got := joinSet(nodes); got != tt.nodes {
				t.Errorf("nodes = %q, want %q", got, tt.nodes)
			}
		})
	}
}

func joinSet(m map[string]bool) string {
	s := ""
	for k := range m {
		if s != "" {
			s += ","
		}
		s += k
	}
	return s
}

func TestUpdatesKeepsOnlyTheLatestSnapshot(t *testing.T) {
	w := New(Options{})
	for _, err := range []string{"first", "second", "third"} {
		w.publish(Snapshot{Err: err})
	}
	if s := <-w.Updates(); s.Err != "third" {
		t.Errorf("a slow reader got %q, want the latest, third", s.Err)
	}
	select {
	case s := <-w.Updates():
		t.Errorf("a second snapshot %q was pending, want only the latest", s.Err)
	default:
	}
}
