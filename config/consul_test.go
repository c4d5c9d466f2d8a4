package config

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

func TestServiceFromConsul(t *testing.T) {
	cfg := Defaults()
	cfg.Files = []string{"/etc/lbd/lbd.toml"}
	cfg.Consul.VirtualServices = ConsulVirtualServices{Tag: "lbd", VIPPools: []netip.Prefix{
		netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:100::/64")}}

	t.Run("valid", func(t *testing.T) {
		s, err := ServiceFromConsul(&cfg, "api", map[string]string{
			"lbd-vip": "198.51.100.10, 198.51.100.11", "lbd-port": "443", "lbd-scheduler": "sh",
			"lbd-scheduler-flags": "sh-port", "lbd-session-affinity": "true", "lbd-session-affinity-timeout": "10m",
			"lbd-source-ranges": "10.0.0.0/8", "lbd-snat": "never", "lbd-quorum": "2", "lbd-weight": "3",
			"version": "1.2.3", // the application's own meta is ignored
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []netip.Addr{netip.MustParseAddr("198.51.100.10"), netip.MustParseAddr("198.51.100.11")}
		if s.Name != "api" || len(s.VIPs) != 2 || s.VIPs[0] != want[0] || s.VIPs[1] != want[1] || s.Port != 443 ||
			s.Protocol != lvs.TCP || s.Scheduler != "sh" || len(s.SchedulerFlags) != 1 || !s.SessionAffinity ||
			s.SessionAffinityTimeout != 10*time.Minute || len(s.SourceRanges) != 1 || s.SNAT != SNATNever || s.Quorum != 2 {
			t.Errorf("service: %+v", s)
		}
		if s.Consul == nil || s.Consul.Service != "api" || !s.Consul.PassingOnly || s.Consul.WeightMeta != "lbd-weight" || s.Consul.OwnChecks {
			t.Errorf("real servers come from the Consul service itself, by Consul health: %+v", s.Consul)
		}
		if s.Pos.String() != `consul service "api"` {
			t.Errorf("provenance %q", s.Pos)
		}
	})

	tests := []struct {
		name string
		meta map[string]string
		want []string // fragments, one per expected error, in order
	}{
		{"nothing", map[string]string{}, []string{
			`consul service "x": meta lbd-vip: missing`, `consul service "x": meta lbd-port: missing`}},
		{"bad port", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "http"}, []string{
			`meta lbd-port: `}},
		{"port out of range", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "70000"}, []string{
			`meta lbd-port: 70000`}},
		{"vip outside pools", map[string]string{"lbd-vip": "192.0.2.1", "lbd-port": "80"}, []string{
			`meta lbd-vip: 192.0.2.1 (VIP 1) is outside the VIP pools Consul may claim from (198.51.100.0/24, 2001:db8:100::/64); expected an address in [consul.virtual_services] vip_pools of /etc/lbd/lbd.toml`}},
		{"bad vip", map[string]string{"lbd-vip": "198.51.100.1,nope", "lbd-port": "80"}, []string{
			`meta lbd-vip: `}},
		{"mixed families", map[string]string{"lbd-vip": "198.51.100.1,2001:db8:100::1", "lbd-port": "80"}, []string{
			`meta lbd-vip: 2001:db8:100::1 is IPv6 but the first VIP`}},
		{"unknown protocol", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-protocol": "SCTP"}, []string{
			`meta lbd-protocol: "SCTP" is not accepted (did you mean "sctp"?); expected one of: tcp, udp, sctp`}},
		{"unknown scheduler", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-scheduler": "fastest"}, []string{
			`meta lbd-scheduler: `}},
		{"typo in a key", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-sheduler": "rr"}, []string{
			`meta lbd-sheduler: unknown lbd meta key (did you mean "lbd-scheduler"?)`}},
		{"affinity timeout without affinity", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-session-affinity-timeout": "1h"}, []string{
			`meta lbd-session-affinity-timeout: has no effect without session_affinity`}},
		{"arp without interface", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80", "lbd-announce": "arp"}, []string{
			`meta lbd-announce: `}},
		{"bad name", map[string]string{"lbd-vip": "198.51.100.1", "lbd-port": "80"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := "x"
			if tt.name == "bad name" {
				name = "-x"
				tt.want = []string{`meta name: "-x" is not a valid service name`}
			}
			_, err := ServiceFromConsul(&cfg, name, tt.meta)
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("err = %v; want an ErrorList", err)
			}
			if len(list) != len(tt.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(list), len(tt.want), err)
			}
			for i, w := range tt.want {
				if !strings.Contains(list[i].Error(), w) {
					t.Errorf("error %d = %q; want it to contain %q", i, list[i], w)
				}
			}
		})
	}
}
