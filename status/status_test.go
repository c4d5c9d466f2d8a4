package status

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/lvs"
)

func view() dataplane.View {
	key := lvs.Key{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}
	rs1, rs2, gone := netip.MustParseAddrPort("10.0.0.1:80"), netip.MustParseAddrPort("10.0.0.2:80"), netip.MustParseAddrPort("10.0.0.3:80")
	return dataplane.View{
		Last: dataplane.SyncResult{Start: time.Unix(1000, 0), Duration: time.Millisecond, Writes: 2, Dumps: 1},
		Desired: desired.State{Services: []desired.Service{{
			Key: key, Scheduler: "wrr", Name: "web", Source: config.Pos{File: "lbd.toml", Line: 3, Col: 1},
			Flags: desired.FlagPersistent, Timeout: 600,
			Dests: []desired.Dest{
				{Addr: rs1, Weight: 3, Real: &config.RealServer{Weight: 3, Pos: config.Pos{File: "lbd.toml", Line: 8, Col: 1}}},
				{Addr: rs2, Weight: 0, Real: &config.RealServer{Weight: 1, Pos: config.Pos{File: "lbd.toml", Line: 11, Col: 1}}},
			},
		}}},
		Kernel: map[lvs.Key]map[netip.AddrPort]int{key: {rs1: 3, gone: 0}},
	}
}

func TestWriteText(t *testing.T) {
	snap := Build("1.0", time.Unix(1010, 0), file.Status{Path: "/etc/lbd/lbd.toml", Files: []string{"/etc/lbd/lbd.toml"}, Loaded: time.Unix(990, 0), Hash: "abc",
		Err: errors.New("lbd.toml:4:1: port: bad"), ErrTime: time.Unix(1005, 0)}, view(), nil, nil)
	snap.AddConns(map[string]map[string]Conns{"192.0.2.10:80/tcp": {"10.0.0.1:80": {Active: 5, Inactive: 12}, "10.0.0.3:80": {Active: 0, Inactive: 1}}})
	var b strings.Builder
	if err := WriteText(&b, snap); err != nil {
		t.Fatal(err)
	}
	want := `lbd 1.0
config: /etc/lbd/lbd.toml (1 files, hash abc, loaded 20s ago)
config REJECTED 5s ago; the configuration above stays in force:
  lbd.toml:4:1: port: bad
sync: 10s ago (requested, 1ms, 2 writes, 1 dumps): ok

VIRTUAL SERVER / REAL SERVER  FORWARD  SCHED                CONFIG  DESIRED  KERNEL  ACTIVE  INACT  HEALTH  SOURCE
192.0.2.10:80/tcp (web)       nat      wrr persistent 600s                                                  lbd.toml:3:1
  -> 10.0.0.1:80                                            3       3        3       5       12     -       lbd.toml:8:1
  -> 10.0.0.2:80                                            1       0        -       -       -      -       lbd.toml:11:1
  -> 10.0.0.3:80                                            0       0        0       0       1      -       draining: no longer desired
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Before any configuration was valid, status says so and that nothing
// was applied, rather than "the configuration above stays in force".
func TestWriteTextInvalidAtStart(t *testing.T) {
	snap := Build("1.0", time.Unix(1010, 0), file.Status{Path: "/etc/lbd/lbd.toml",
		Err: errors.New("lbd.toml:4:1: port: bad\nlbd.toml:9:1: vips: bad"), ErrTime: time.Unix(1005, 0)}, dataplane.View{}, nil, nil)
	var b strings.Builder
	if err := WriteText(&b, snap); err != nil {
		t.Fatal(err)
	}
	want := `lbd 1.0
config: /etc/lbd/lbd.toml is INVALID (5s ago); nothing is applied and the kernel is left as it was until a valid edit:
  lbd.toml:4:1: port: bad
  lbd.toml:9:1: vips: bad
sync: none yet

VIRTUAL SERVER / REAL SERVER  FORWARD  SCHED  CONFIG  DESIRED  KERNEL  ACTIVE  INACT  HEALTH  SOURCE
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestServeAndFetch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "lbd.sock")
	if _, err := Fetch(t.Context(), sock); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("without a daemon: %v; want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, sock, func() Snapshot { return Build("1.0", time.Now(), file.Status{Path: "p"}, view(), nil, nil) })
	}()
	var snap Snapshot
	var err error
	for i := 0; i < 100; i++ {
		if snap, err = Fetch(t.Context(), sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Services) != 1 || len(snap.Services[0].RealServers) != 3 || *snap.Services[0].RealServers[0].KernelWeight != 3 {
		t.Errorf("snapshot over the socket: %+v", snap)
	}
	// Go's profiles are served too (gzipped protobuf).
	if prof, err := FetchProfile(t.Context(), sock, "heap"); err != nil || len(prof) < 2 || prof[0] != 0x1f || prof[1] != 0x8b {
		t.Errorf("heap profile: %d bytes, %v", len(prof), err)
	}
	if _, err := FetchProfile(t.Context(), sock, "no-such-profile"); err == nil {
		t.Errorf("an unknown profile was served")
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestWriteTextConsul(t *testing.T) {
	now := time.Unix(1010, 0)
	tests := []struct {
		name   string
		consul Consul
		want   string
	}{
		{"connected with a refused registration and a VIP registered", Consul{
			Connected: true, Synced: true, LastContact: time.Unix(1008, 0), Queries: 3, Tagged: 1, Requests: 40, Errors: 2,
			Problems:      []string{`consul service "api": meta lbd-port: missing`},
			Registrations: []Registration{{ID: "lbd-web-192.0.2.10", Name: "web", Address: "192.0.2.10:80", Healthy: true}},
		}, `
consul: connected (last answer 2s ago), 3 services followed, 1 tagged, 40 requests, 2 failed
consul registrations refused (1):
  consul service "api": meta lbd-port: missing
registered in consul: web 192.0.2.10:80 (lbd-web-192.0.2.10) passing
`},
		{"unreachable", Consul{LastContact: time.Unix(950, 0), Error: "connection refused"}, `
consul: UNREACHABLE (last answer 1m0s ago): connection refused; what came from Consul stays as last known
`},
		{"never reached", Consul{Error: "connection refused"}, `
consul: NOT REACHED yet: connection refused
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeConsul(&b, now, &tt.consul)
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestWriteTextVRRP(t *testing.T) {
	now := time.Unix(1010, 0)
	tests := []struct {
		name string
		vrrp []VRRP
		why  string
		want string
	}{
		{"master and a backup refusing adverts", []VRRP{
			{Name: "outside4", Group: "pair", Interface: "eth0", Family: 4, VRID: 51, Version: 3, Priority: 150, State: "MASTER",
				Since: time.Unix(830, 0), Master: "198.18.2.2", MasterPriority: 150, Transitions: 2, Sent: 900, Received: 3},
			{Name: "inside", Interface: "eth1", Family: 6, VRID: 52, Version: 3, Priority: 100, State: "BACKUP",
				Since: time.Unix(1000, 0), Received: 10, Refused: map[string]uint64{"peer": 4, "addresses": 1}, SendErrors: 1},
		}, "", `
vrrp outside4 (group pair) on eth0 IPv4, VRID 51, version 3, priority 150: MASTER for 3m0s, 2 transitions
  master: 198.18.2.2 (priority 150); adverts sent 900, received 3

vrrp inside on eth1 IPv6, VRID 52, version 3, priority 100: BACKUP for 10s, 0 transitions
  master: none heard; adverts sent 0, received 10, send errors 1, refused (addresses) 1, refused (peer) 4
`},
		{"not running", nil, "VRRP instance outside4 on eth0: eth0 has no IPv4 address", `
vrrp: NOT RUNNING, this box holds none of the pair's addresses: VRRP instance outside4 on eth0: eth0 has no IPv4 address
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			writeVRRP(&b, now, tt.vrrp, tt.why)
			if b.String() != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tt.want)
			}
		})
	}
}

func TestWriteTextSync(t *testing.T) {
	var b strings.Builder
	writeSync(&b, []SyncDaemon{
		{Role: "master", Interface: "eth1", SyncID: 51, Group: "224.0.0.81", Port: 8848, TTL: 1, MaxLen: 1472},
		{Role: "backup", Interface: "eth1", SyncID: 51, Group: "224.0.0.81", Port: 8848, TTL: 1},
	})
	want := `
ipvs connection sync (running unless the sync above failed):
  master on eth1: id 51, group 224.0.0.81 port 8848 ttl 1, max length 1472
  backup on eth1: id 51, group 224.0.0.81 port 8848 ttl 1, max length from the MTU
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
