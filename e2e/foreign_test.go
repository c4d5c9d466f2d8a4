//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestForeignObjects: lbd touches only its own objects. An ipset that only
// looks like lbd's and a dummy link of the configured name that lbd did
// not create survive its syncs and lbd cleanup; a link handed over by its
// alias becomes lbd's.
func TestForeignObjects(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 1})
	tp.StartBackends(t)
	dir := tp.Directors[0]
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	real := netip.AddrPortFrom(tp.RealServers[0].Addr(tp.Backend), 80)
	theirs := topo.VIP(9)
	dir.MustExec(t, "ipset", "create", "LBD-ALLOW", "hash:ip")
	dir.MustExec(t, "ipset", "add", "LBD-ALLOW", theirs.String())
	dir.MustExec(t, "ip", "link", "add", "dummy0", "type", "dummy")
	dir.MustExec(t, "ip", "addr", "add", theirs.String()+"/32", "dev", "dummy0")
	addrsOf := func(link string) string {
		out, _ := dir.Exec("ip", "-o", "addr", "show", "dev", link)
		return out
	}
	l := startLBD(t, dir, fmt.Sprintf(`
[sync]
min_sync_period = "100ms"
sync_period = "1s"

[dataplane]
interface = "dummy0"

[[service]]
name = "web"
vips = ["%s"]
port = 80
snat = "never"
real_server = [{ address = "%s" }]
`, web.Addr(), real.Addr()))

	t.Run("a dummy link lbd did not create is refused and left alone", func(t *testing.T) {
		l.waitLog(t, "the refusal", "interface dummy0 exists and was not created by lbd")
		waitRules(t, dir, "IPVS synced beside the refusal", fmt.Sprintf("-a -t %s -r %s -m -w 1", web, real))
		if got := addrsOf("dummy0"); !strings.Contains(got, theirs.String()+"/32") || strings.Contains(got, web.Addr().String()) {
			t.Errorf("dummy0 was changed:\n%s", got)
		}
		if out := dir.MustExec(t, "ip", "-d", "link", "show", "dummy0"); strings.Contains(out, "alias") {
			t.Errorf("dummy0 was marked:\n%s", out)
		}
	})

	t.Run("cleanup leaves a foreign LBD-ALLOW set and the foreign link", func(t *testing.T) {
		// Cleanup is for a stopped lbd: a running one repairs what it
		// removes (at once, since drift is noticed), and its sets stay in use.
		l.proc.Stop()
		defer l.start()
		out := dir.MustExec(t, l.bin, "cleanup", "-c", l.cfgPath, "--state-dir", l.stateDir)
		if !strings.Contains(out, "nothing of interface dummy0") {
			t.Errorf("cleanup does not say it left dummy0:\n%s", out)
		}
		if got := dir.MustExec(t, "ipset", "list", "LBD-ALLOW"); !strings.Contains(got, theirs.String()) {
			t.Errorf("LBD-ALLOW lost its entry:\n%s", got)
		}
		if got := addrsOf("dummy0"); !strings.Contains(got, theirs.String()+"/32") {
			t.Errorf("cleanup changed dummy0:\n%s", got)
		}
	})

	t.Run("a link handed over by its alias becomes lbd's", func(t *testing.T) {
		dir.MustExec(t, "ip", "link", "set", "dummy0", "alias", "lbd: handed over by the admin")
		eventually(t, "dummy0 holding exactly the VIP", func() error {
			got := addrsOf("dummy0")
			if !strings.Contains(got, web.Addr().String()+"/32") || strings.Contains(got, theirs.String()) {
				return fmt.Errorf("dummy0:\n%s", got)
			}
			return nil
		})
		l.proc.Stop()
		dir.MustExec(t, l.bin, "cleanup", "-c", l.cfgPath, "--state-dir", l.stateDir)
		if out, err := dir.Exec("ip", "link", "show", "dummy0"); err == nil {
			t.Errorf("cleanup left lbd's dummy0:\n%s", out)
		}
		if got := dir.MustExec(t, "ipset", "list", "-n"); !strings.Contains(got, "LBD-ALLOW") || strings.Contains(got, "LBD-VIPS") {
			t.Errorf("ipsets after cleanup:\n%s", got)
		}
	})
}
