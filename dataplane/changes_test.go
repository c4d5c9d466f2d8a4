package dataplane

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

func TestLogChanges(t *testing.T) {
	key := func(last byte) lvs.Key {
		return lvs.Key{Addr: netip.AddrFrom4([4]byte{192, 0, 2, last}), Port: 80, Protocol: lvs.TCP}
	}
	dest := func(last byte, file string, line int) desired.Dest {
		return desired.Dest{Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, last}), 80), Weight: 1,
			Real: &config.RealServer{Weight: 1, Pos: config.Pos{File: file, Line: line}}}
	}
	web := []desired.Dest{dest(1, "web.toml", 7), dest(2, "consul:web", 0)}
	svc := func(k byte, ds []desired.Dest) desired.Service {
		return desired.Service{Key: key(k), Name: fmt.Sprintf("s%d", k), Source: config.Pos{File: "lbd.toml", Line: int(k)}, Dests: ds}
	}
	many := make([]desired.Service, 30)
	for i := range many {
		many[i] = svc(byte(10+i), nil)
	}
	tests := []struct {
		name       string
		prev, next []desired.Service
		want       []string // one fragment per line, in order
	}{
		{"shared destinations: nothing", []desired.Service{svc(1, web)}, []desired.Service{svc(1, web)}, nil},
		{"a real server from Consul leaves, one from a file joins",
			[]desired.Service{svc(1, web)},
			[]desired.Service{svc(1, []desired.Dest{dest(1, "web.toml", 7), dest(3, "web.toml", 9)})},
			[]string{
				`msg="real server added" virtual_server=192.0.2.1:80/tcp real_server=10.0.0.3:80 weight=1 source=web.toml:9`,
				`msg="real server removed" virtual_server=192.0.2.1:80/tcp real_server=10.0.0.2:80 source=consul:web`,
			}},
		{"virtual servers added and removed",
			[]desired.Service{svc(1, web), svc(3, nil)},
			[]desired.Service{svc(1, web), svc(2, nil)},
			[]string{
				`msg="virtual server added" virtual_server=192.0.2.2:80/tcp service=s2 source=lbd.toml:2`,
				`msg="virtual server removed" virtual_server=192.0.2.3:80/tcp service=s3 source=lbd.toml:3`,
			}},
		{"a mass change is summarised", []desired.Service{}, many,
			append(strings.Split(strings.Repeat(`msg="virtual server added"`+"\n", maxLoggedChanges), "\n")[:maxLoggedChanges],
				`msg="more virtual servers and real servers added or removed" not_logged=10`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logChanges(slog.New(slog.NewTextHandler(&buf, nil)), tt.prev, tt.next)
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if buf.Len() == 0 {
				lines = nil
			}
			if len(lines) != len(tt.want) {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), len(tt.want), buf.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(lines[i], w) {
					t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
				}
			}
		})
	}
}

func TestLogFirstChanges(t *testing.T) {
	key := func(last byte) lvs.Key {
		return lvs.Key{Addr: netip.AddrFrom4([4]byte{192, 0, 2, last}), Port: 80, Protocol: lvs.TCP}
	}
	addr := func(last byte) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, last}), 80)
	}
	// As the restart baseline has them: the kernel's real servers of a
	// weight, without provenance.
	inKernel := func(k byte, rs ...byte) desired.Service {
		s := desired.Service{Key: key(k), Scheduler: "wrr"}
		for _, r := range rs {
			s.Dests = append(s.Dests, desired.Dest{Addr: addr(r), Weight: 1})
		}
		return s
	}
	configured := func(k byte, weight int, rs ...byte) desired.Service {
		s := desired.Service{Key: key(k), Name: fmt.Sprintf("s%d", k), Scheduler: "wrr", Source: config.Pos{File: "lbd.toml", Line: int(k)}}
		for _, r := range rs {
			s.Dests = append(s.Dests, desired.Dest{Addr: addr(r), Weight: weight,
				Real: &config.RealServer{Weight: weight, Pos: config.Pos{File: "lbd.toml", Line: 10 + int(r)}}})
		}
		return s
	}
	tests := []struct {
		name         string
		kernel, next []desired.Service
		want         []string // the info lines, one fragment each, in order
		kept         int
	}{
		{"a restart with nothing changed logs nothing",
			[]desired.Service{inKernel(1, 1, 2), inKernel(2, 3)},
			[]desired.Service{configured(1, 1, 1, 2), configured(2, 1, 3)},
			nil, 2},
		{"real servers held at weight 0 are no news",
			[]desired.Service{inKernel(1, 1)},
			[]desired.Service{configured(1, 0, 1, 2)},
			nil, 1},
		{"only what the kernel lacked is added",
			[]desired.Service{inKernel(1, 1)},
			[]desired.Service{configured(1, 1, 1, 2), configured(3, 1, 5)},
			[]string{
				`msg="real server added" virtual_server=192.0.2.1:80/tcp real_server=10.0.0.2:80 weight=1 source=lbd.toml:12`,
				`msg="virtual server added" virtual_server=192.0.2.3:80/tcp service=s3 source=lbd.toml:3`,
			}, 0},
		{"what the kernel held and the configuration dropped is removed",
			[]desired.Service{inKernel(1, 1, 2), inKernel(4, 7)},
			[]desired.Service{configured(1, 1, 1)},
			[]string{
				`msg="real server removed" virtual_server=192.0.2.1:80/tcp real_server=10.0.0.2:80 note="found in the kernel at start, no longer configured"`,
				`msg="virtual server removed" virtual_server=192.0.2.4:80/tcp note="found in the kernel at start, no longer configured"`,
			}, 0},
		{"a first start: everything is added",
			[]desired.Service{},
			[]desired.Service{configured(1, 1, 1)},
			[]string{`msg="virtual server added" virtual_server=192.0.2.1:80/tcp`}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			logFirstChanges(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), tt.kernel, tt.next)
			var info []string
			debug := ""
			for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
				switch {
				case strings.Contains(l, "level=INFO"):
					info = append(info, l)
				case strings.Contains(l, "level=DEBUG"):
					debug = l
				}
			}
			if len(info) != len(tt.want) {
				t.Fatalf("%d info lines, want %d:\n%s", len(info), len(tt.want), buf.String())
			}
			for i, w := range tt.want {
				if !strings.Contains(info[i], w) {
					t.Errorf("line %d: %s\nwant it to contain %s", i, info[i], w)
				}
			}
			if want := fmt.Sprintf("virtual servers found in the kernel kept\" virtual_servers=%d", tt.kept); !strings.Contains(debug, want) {
				t.Errorf("debug line %q; want %q", debug, want)
			}
		})
	}
}
