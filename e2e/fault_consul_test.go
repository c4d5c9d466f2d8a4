//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// consulBulk is the number of generated services beside the Consul-fed
// one: enough real servers that web's two are a small share of them, so
// that the safety valve does not hold their removal, as on a real box.
const consulBulk = 50

// consulRestarts is how many times the agent is killed and restarted: a
// restarted server answers default reads from an empty catalog for a
// moment (before lbd read consistently after errors, it met that moment
// in about 2 of 5 restarts in the guest); each restart is another chance
// to meet it.
const consulRestarts = 3

// TestFaultConsul: the Consul agent that feeds a service its real servers
// is SIGKILLed and restarted (consulRestarts times) while a client sends a stream of requests
// through the service. No request may fail, and IPVS must be the same
// before, during and after.
func TestFaultConsul(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	f := faultDirector(t, dir)
	agent := startConsul(t, dir)
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	var dests []string
	for i, rs := range tp.RealServers {
		real := netip.AddrPortFrom(rs.Addr(tp.Backend), 80)
		agent.register(fmt.Sprintf("web-%d", i+1), "web", real, false, nil, nil)
		dests = append(dests, fmt.Sprintf("-a -t %s -r %s -m -w 1", web, real))
	}
	l := newLBD(t, dir, "", faultConfig(consulBulk, fmt.Sprintf(`
[consul]
address = "127.0.0.1:8500"

[[service]]
name = "web"
vips = ["%s"]
port = 80
scheduler = "rr"
snat = "never"
health_check = { type = "none" }
[service.consul]
service = "web"
`, web.Addr())))
	l.start()
	waitRules(t, dir, "web's real servers from Consul", dests...)
	waitServes(t, client, topo.HTTP, web)
	before := ipvsadmSave(t, dir)

	consulState := func(want string) func() error {
		return func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil {
				return err
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "consul:") {
					if strings.Contains(line, want) {
						return nil
					}
					return fmt.Errorf("lbd status: %s", line)
				}
			}
			return fmt.Errorf("lbd status has no consul line:\n%s", out)
		}
	}
	mark := len(l.proc.Output())
	underStream(t, client, web, func() {
		for range consulRestarts {
			if err := agent.proc.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			eventually(t, "lbd status to say Consul is unreachable", consulState("consul: UNREACHABLE"))
			if got := ipvsadmSave(t, dir); !slices.Equal(got, before) {
				t.Errorf("IPVS changed while Consul was down:\n%s", strings.Join(got, "\n"))
			}
			agent.start()
			eventually(t, "lbd status to say Consul answers again", consulState("consul: connected"))
		}
	})
	if got := ipvsadmSave(t, dir); !slices.Equal(got, before) {
		t.Errorf("IPVS changed across Consul's restart:\n%s", strings.Join(got, "\n"))
	}
	// Even a change undone at once (that no request happened to meet) is
	// wrong: the restarted agent's catalog is the one it had.
	for _, line := range strings.Split(sinceLog(l.proc, mark), "\n") {
		if strings.Contains(line, "real server removed") || strings.Contains(line, "real server added") {
			t.Errorf("lbd changed a real server across Consul's restart: %s", line)
		}
	}
	if d := f.check(dir); d != "" {
		t.Error(d)
	}
}
