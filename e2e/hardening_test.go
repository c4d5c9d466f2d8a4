//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestHardening: no input takes lbd out of service. An invalid
// configuration at start leaves the kernel alone while lbd status says
// what is wrong; a reload that cannot be applied keeps the last good one;
// Consul enabled with nothing to follow does not hold syncs back.
func TestHardening(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 1})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	real := netip.AddrPortFrom(tp.RealServers[0].Addr(tp.Backend), 80)
	service := func(weight int) string {
		return fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "2s"

[[service]]
name = "web"
vips = ["%s"]
port = 80
snat = "never"
real_server = [{ address = "%s", weight = %d }]
`, web.Addr(), real.Addr(), weight)
	}
	dest := func(w int) string { return fmt.Sprintf("-a -t %s -r %s -m -w %d", web, real, w) }
	alive := func(t *testing.T, l *lbd) {
		t.Helper()
		if done, err := l.proc.Exited(); done {
			t.Fatalf("lbd ended (%v):\n%s", err, l.proc.Output())
		}
	}

	l := startLBD(t, dir, service(1)+"\nbogus_key = 1\n")
	t.Run("an invalid configuration at start leaves the kernel alone and says why", func(t *testing.T) {
		// Before any valid configuration, lbd status answers on the
		// default socket: the configuration's own cannot be known.
		eventually(t, "lbd status to answer", func() error {
			out, err := dir.Exec(l.bin, "status", "-c", l.cfgPath)
			if err != nil {
				return fmt.Errorf("lbd status: %v: %s", err, out)
			}
			if !strings.Contains(out, "INVALID") || !strings.Contains(out, "bogus_key") {
				return fmt.Errorf("lbd status does not say what is wrong:\n%s", out)
			}
			return nil
		})
		if got := ipvsadmSave(t, dir); len(got) != 0 {
			t.Errorf("the kernel was written without a valid configuration: %q", got)
		}
		if out, err := dir.Exec("ip", "link", "show", topo.VIPLink); err == nil {
			t.Errorf("%s was created without a valid configuration: %s", topo.VIPLink, out)
		}
		alive(t, l)
	})

	t.Run("the first valid edit is applied", func(t *testing.T) {
		l.writeConfig(t, service(1))
		waitRules(t, dir, "the service after the fix", dest(1))
		waitServes(t, client, topo.HTTP, web)
		out := dir.MustExec(t, l.bin, "status", "--socket", l.socket())
		if strings.Contains(out, "INVALID") || strings.Contains(out, "REJECTED") {
			t.Errorf("lbd status still reports the fixed error:\n%s", out)
		}
		if out := dir.MustExec(t, "ip", "-d", "link", "show", topo.VIPLink); !strings.Contains(out, "alias lbd: VIPs") {
			t.Errorf("lbd's new link is not marked as lbd's:\n%s", out)
		}
	})

	t.Run("an unmarked link left by an older lbd is adopted on this boot", func(t *testing.T) {
		dir.MustExec(t, "ip", "link", "set", "dev", topo.VIPLink, "alias", "")
		l.kill(t)
		eventually(t, "the link marked again", func() error {
			out := dir.MustExec(t, "ip", "-d", "link", "show", topo.VIPLink)
			if !strings.Contains(out, "alias lbd: VIPs") {
				return fmt.Errorf("not marked:\n%s", out)
			}
			return nil
		})
		probeOK(t, client, topo.HTTP, web, 3)
	})

	t.Run("a reload whose Consul client cannot be built is refused", func(t *testing.T) {
		l.writeConfig(t, service(2)+"\n[consul]\naddress = \"127.0.0.1:1\"\ntoken_file = \"/nonexistent/lbd-token\"\n")
		eventually(t, "the refusal in lbd status", func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil || !strings.Contains(out, "REJECTED") || !strings.Contains(out, "/nonexistent/lbd-token") {
				return fmt.Errorf("lbd status (%v):\n%s", err, out)
			}
			return nil
		})
		alive(t, l)
		waitRules(t, dir, "the last good configuration still in force", dest(1))
		probeOK(t, client, topo.HTTP, web, 3)
	})

	t.Run("a foreign virtual server survives lbd claiming and releasing it", func(t *testing.T) {
		theirs := netip.AddrPortFrom(topo.VIP(2), 80)
		dir.MustExec(t, "ipvsadm", "-A", "-t", theirs.String(), "-s", "sh")
		dir.MustExec(t, "ipvsadm", "-a", "-t", theirs.String(), "-r", real.String(), "-m", "-w", "7")
		foreign := []string{"-A -t " + theirs.String() + " -s sh", fmt.Sprintf("-a -t %s -r %s -m -w 7", theirs, real)}
		l.writeConfig(t, service(5)+claimOf(theirs, real))
		waitRules(t, dir, "the edit applied beside the conflict", dest(5))
		eventually(t, "the conflict in lbd status", func() error {
			out, err := dir.Exec(l.bin, "status", "--socket", l.socket())
			if err != nil || !strings.Contains(out, "not created by lbd") {
				return fmt.Errorf("lbd status (%v):\n%s", err, out)
			}
			return nil
		})
		l.kill(t) // a full reconcile after a restart leaves it too
		waitRules(t, dir, "lbd back", dest(5))
		l.writeConfig(t, service(6))
		waitRules(t, dir, "the claim released", dest(6))
		waitRules(t, dir, "theirs untouched", foreign...)
	})

	t.Run("adopt = true takes a foreign virtual server over", func(t *testing.T) {
		theirs := netip.AddrPortFrom(topo.VIP(3), 80)
		dir.MustExec(t, "ipvsadm", "-A", "-t", theirs.String(), "-s", "sh")
		dir.MustExec(t, "ipvsadm", "-a", "-t", theirs.String(), "-r", real.String(), "-m", "-w", "7")
		l.writeConfig(t, service(6)+strings.Replace(claimOf(theirs, real), "port = 80", "port = 80\nadopt = true", 1))
		waitRules(t, dir, "theirs rewritten to the configuration", "-A -t "+theirs.String()+" -s wrr", fmt.Sprintf("-a -t %s -r %s -m -w 2", theirs, real))
		l.writeConfig(t, service(6))
		waitRules(t, dir, "the adopted virtual server deleted with its service", "!-A -t "+theirs.String())
	})

	t.Run("Consul with nothing to follow does not hold syncs back", func(t *testing.T) {
		consul := "\n[consul]\naddress = \"127.0.0.1:1\"\n"
		l.writeConfig(t, service(7)+consul)
		waitRules(t, dir, "the edit synced while Consul follows nothing", dest(7))
		// And from a start: the first sync does not wait for Consul.
		l.kill(t)
		l.writeConfig(t, service(8)+consul)
		waitRules(t, dir, "the first sync after a restart", dest(8))
		alive(t, l)
		probeOK(t, client, topo.HTTP, web, 3)
	})

	t.Run("an unreadable ownership ledger is set aside and the syncs go on", func(t *testing.T) {
		theirs := netip.AddrPortFrom(topo.VIP(2), 80)
		ledger := filepath.Join(l.stateDir, "ipvs-owned.json")
		if err := os.WriteFile(ledger, []byte(`{"version":1,"ipvs":["198.18.`), 0o600); err != nil {
			t.Fatal(err)
		}
		l.kill(t)
		l.writeConfig(t, service(9))
		waitRules(t, dir, "the edit synced after the ledger was set aside", dest(9), "-A -t "+theirs.String()+" -s sh")
		l.waitLog(t, "the recovery logged", "the ownership ledger was unreadable and is set aside")
		aside, _ := filepath.Glob(ledger + ".unreadable-*")
		if len(aside) != 1 {
			t.Errorf("set aside: %v; want one file", aside)
		}
		// web, whose VIP is on lbd0, was taken over (its weight follows
		// the edit); theirs, claimed again, is still foreign.
		l.writeConfig(t, service(10)+strings.Replace(claimOf(theirs, real), "weight = 2", "weight = 3", 1))
		waitRules(t, dir, "web still lbd's after the recovery", dest(10), "-A -t "+theirs.String()+" -s sh", fmt.Sprintf("-a -t %s -r %s -m -w 7", theirs, real))
		l.waitLog(t, "the conflict after the recovery", "not created by lbd")
	})
}

// claimOf is a service at vs with one real server.
func claimOf(vs, real netip.AddrPort) string {
	return fmt.Sprintf("\n[[service]]\nname = \"claim\"\nvips = [\"%s\"]\nport = %d\nsnat = \"never\"\nreal_server = [{ address = \"%s\", weight = 2 }]\n", vs.Addr(), vs.Port(), real.Addr())
}
