//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// trackConfig is box i's configuration: pairConfig's, with web checked
// over TCP and a quorum of both real servers, which the instance tracks
// (track_services), as it tracks its syncs (track_syncs, the default 3);
// extra adds services.
func trackConfig(p *pair, i, prio int, extra string) string {
	cfg := pairConfig(p.web, p.tp, prio, "track_services = [\"web\"]\n")
	cfg = strings.Replace(cfg, `health_check = { type = "none" }`, "quorum = 2\nhealth_check = { type = \"tcp\", interval = \"300ms\" }", 1)
	return cfg + syncConfig(p.tp, i) + extra
}

// TestPairTracking: the master gives way when its own syncs keep failing
// (its state directory turned read-only under an edit that needs the
// ledger written) and when, as its checks see it, the tracked service
// falls below quorum; the other box takes over, and the one that gave
// way comes back as backup.
func TestPairTracking(t *testing.T) {
	p := newPairTopology(t)
	state := mountTmpfs(t, "size=1m")
	p.boxes[0] = newLBD(t, p.tp.Directors[0], state, trackConfig(p, 0, 150, ""))
	p.boxes[0].start()
	p.waitRoles(t, "dir1 started", "MASTER")
	p.waitFirstSync(t, 0)
	p.boxes[1] = startLBD(t, p.tp.Directors[1], trackConfig(p, 1, 100, ""))
	p.waitRoles(t, "dir2 started", "MASTER", "BACKUP")
	waitServes(t, p.client, topo.HTTP, p.web)

	t.Run("the master's syncs keep failing", func(t *testing.T) {
		remount(t, state, unix.MS_RDONLY)
		extra := fmt.Sprintf("\n[[service]]\nname = \"extra\"\nvips = [%q]\nport = 80\nsnat = \"never\"\nhealth_check = { type = \"none\" }\nreal_server = [{ address = %q }]\n",
			topo.VIP(2), p.tp.RealServers[0].Addr(p.tp.Backend))
		failed := streamFigure(t, p.client, p.web, func() {
			p.boxes[0].writeConfig(t, trackConfig(p, 0, 150, extra))
			waitSyncError(t, p.boxes[0], "read-only file system")
			p.waitRoles(t, "dir2 to take over from the box whose syncs fail", "FAULT", "MASTER")
		})
		t.Logf("FIGURE master gave way (syncs failing): %d short requests failed", failed)
		if !strings.Contains(p.boxes[0].proc.Output(), "because=\"syncs failing\"") {
			t.Errorf("dir1's log does not say why it went to FAULT:\n%s", p.boxes[0].proc.Output())
		}
		remount(t, state, 0)
		p.waitRoles(t, "dir1 back as backup once its syncs succeed", "BACKUP", "MASTER")
		probeOK(t, p.client, topo.HTTP, p.web, 4)
	})

	t.Run("the master's checks see the tracked service below quorum", func(t *testing.T) {
		// Only dir2's own checks of one real server fail (from its own
		// address; forwarded traffic keeps the client's).
		dir2 := p.tp.Directors[1]
		rule := []string{"OUTPUT", "-s", dir2.Addr(p.tp.Backend).String(), "-d", p.tp.RealServers[0].Addr(p.tp.Backend).String(),
			"-p", "tcp", "--dport", "80", "-j", "REJECT", "--reject-with", "tcp-reset"}
		failed := streamFigure(t, p.client, p.web, func() {
			dir2.MustExec(t, append([]string{"iptables", "-I"}, rule...)...)
			p.waitRoles(t, "dir1 to take over from the box below quorum", "MASTER", "FAULT")
		})
		t.Logf("FIGURE master gave way (below quorum): %d short requests failed", failed)
		dir2.MustExec(t, append([]string{"iptables", "-D"}, rule...)...)
		p.waitRoles(t, "dir2 back as backup at quorum", "MASTER", "BACKUP")
		probeOK(t, p.client, topo.HTTP, p.web, 4)
	})
}
