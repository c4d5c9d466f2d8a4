//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// kaVersion is one way an unchanged keepalived box runs VRRP.
type kaVersion struct {
	name string
	// lbd and keepalived hold the same settings in their own words.
	lbd, keepalived string
}

var kaVersions = []kaVersion{
	// keepalived's defaults: version 2, one advert a second, a password.
	{"v2 defaults", "version = 2\nadvert_interval = \"1s\"\nauth_type = \"pass\"\nauth_pass = \"s3cret\"\n",
		"advert_int 1\n    authentication {\n        auth_type PASS\n        auth_pass s3cret\n    }\n"},
	{"v3", "version = 3\nadvert_interval = \"200ms\"\n", "advert_int 0.2\n"},
}

// kaBox is how one keepalived box of a pair is set up.
type kaBox struct {
	v        kaVersion
	version  int
	priority int
	// likeLBD runs it as the failover benchmark's lbd pair runs: IPVS
	// connection sync on the inside link (lvs_sync_daemon, as
	// [ha.ipvs_sync]), no preemption (lbd's default) and the inside link
	// tracked (as track_interfaces).
	likeLBD bool
	// advertised lists the VIP in virtual_ipaddress (the adverts carry
	// it) rather than virtual_ipaddress_excluded.
	advertised bool
}

// keepalivedConfig is the peer box's keepalived.conf: the same VRRP
// instance as lbd's (the same virtual_ipaddress list), the VIP as an
// excluded address, and the same virtual servers over IPVS.
func keepalivedConfig(p *pair, b kaBox) string {
	var global, instance string
	if b.likeLBD {
		global = fmt.Sprintf("    lvs_sync_daemon %s outside id 51\n", p.tp.Backend.Name)
		instance = fmt.Sprintf("    nopreempt\n    track_interface {\n        %s\n    }\n", p.tp.Backend.Name)
	}
	vipLine, excluded := "", fmt.Sprintf("    virtual_ipaddress_excluded {\n        %s/32 dev %s\n    }\n", p.web.Addr(), p.tp.Frontend.Name)
	if b.advertised {
		vipLine, excluded = fmt.Sprintf("        %s/32 dev %s\n", p.web.Addr(), p.tp.Frontend.Name), ""
	}
	var servers strings.Builder
	for _, port := range []uint16{p.web.Port(), topo.BackendPushPort} {
		fmt.Fprintf(&servers, "virtual_server %s %d {\n    lb_algo rr\n    lb_kind NAT\n    protocol TCP\n", p.web.Addr(), port)
		for _, rs := range p.tp.RealServers {
			fmt.Fprintf(&servers, "    real_server %s %d {\n        weight 1\n    }\n", rs.Addr(p.tp.Backend), port)
		}
		servers.WriteString("}\n")
	}
	return fmt.Sprintf(`global_defs {
    router_id peer
    vrrp_version %d
%s}
vrrp_instance outside {
    state BACKUP
    interface %s
    virtual_router_id 51
    priority %d
    %s
%s    virtual_ipaddress {
%s        %s
        %s dev %s
    }
%s}
%s`, b.version, global, p.tp.Frontend.Name, b.priority, b.v.keepalived, instance, vipLine, pairOutside, pairInside, p.tp.Backend.Name,
		excluded, servers.String())
}

// keepalived is keepalived running on a director: its main process (the
// parent of its VRRP and checker processes) and the directory of its
// files.
type keepalived struct {
	*topo.Process
	dir string
}

// pid is the process id keepalived wrote to its pid file name: "k.pid"
// (the parent), "v.pid" (VRRP), "c.pid" (the checker, which runs IPVS).
func (k *keepalived) pid(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(k.dir, name))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// startKeepalived runs keepalived on director i (VRRP and IPVS).
func startKeepalived(t *testing.T, p *pair, i int, conf string) *keepalived {
	t.Helper()
	dir := t.TempDir()
	cf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := p.tp.Directors[i].Start(t, "keepalived", "/usr/sbin/keepalived", "--dont-fork", "--log-console", "--log-detail", "--no-syslog",
		"-f", cf, "-p", filepath.Join(dir, "k.pid"), "-r", filepath.Join(dir, "v.pid"), "-c", filepath.Join(dir, "c.pid"), "-b", filepath.Join(dir, "b.pid"))
	return &keepalived{Process: proc, dir: dir}
}

// startMixedPair runs lbd on dir1 and keepalived on dir2, the one of
// higher priority first: neither preempts by default, so the first
// master stays master.
func startMixedPair(t *testing.T, v kaVersion, version, lbdPrio, kaPrio int, advertised bool) (*pair, *keepalived) {
	t.Helper()
	p := newPairTopology(t)
	tp := p.tp
	lconf := pairConfigVRRP(p.web, tp, lbdPrio, v.lbd)
	if advertised {
		// The VIP first, as keepalived's list has it.
		lconf = strings.Replace(lconf, "addresses = [", fmt.Sprintf("addresses = [\"%s\", ", p.web.Addr()), 1)
	}
	startLbd := func() { p.boxes[0] = startLBD(t, tp.Directors[0], lconf) }
	conf := keepalivedConfig(p, kaBox{v: v, version: version, priority: kaPrio, advertised: advertised})
	var ka *keepalived
	if lbdPrio > kaPrio {
		startLbd()
		p.waitRoles(t, "lbd master", "MASTER")
		ka = startKeepalived(t, p, 1, conf)
	} else {
		ka = startKeepalived(t, p, 1, conf)
		p.waitKeepalived(t, "keepalived master", true)
		startLbd()
	}
	return p, ka
}

// waitKeepalived waits until the keepalived box holds the pair's
// addresses (master) or none (backup).
func (p *pair) waitKeepalived(t *testing.T, what string, master bool) {
	t.Helper()
	eventually(t, what, func() error { return p.holds(1, master) })
}

// TestPairWithKeepalived: an lbd box and an unchanged keepalived box form
// one pair, with keepalived's defaults (version 2, a password) and with
// version 3, and fail over both ways.
func TestPairWithKeepalived(t *testing.T) {
	for i, v := range kaVersions {
		version := 2 + i
		t.Run(v.name+": lbd master, keepalived backup", func(t *testing.T) {
			p, ka := startMixedPair(t, v, version, 150, 100, false)
			p.waitRoles(t, "lbd master", "MASTER")
			p.waitKeepalived(t, "keepalived backup", false)
			waitServes(t, p.client, topo.HTTP, p.web)
			if st, _ := p.vrrpState(0); st.Refused != nil {
				t.Errorf("lbd refused keepalived's adverts: %v", st.Refused)
			}
			// lbd stops: priority 0, keepalived takes over at once.
			if err := p.boxes[0].proc.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitKeepalived(t, "keepalived to take over", true)
			eventually(t, "lbd's box to give its addresses up", func() error { return p.holds(0, false) })
			waitServes(t, p.client, topo.HTTP, p.web)
			if !strings.Contains(ka.Output(), "Entering MASTER STATE") {
				t.Errorf("keepalived did not log its takeover:\n%s", ka.Output())
			}
		})
		t.Run(v.name+": keepalived master, lbd backup", func(t *testing.T) {
			p, ka := startMixedPair(t, v, version, 100, 150, false)
			p.waitKeepalived(t, "keepalived master", true)
			p.waitRoles(t, "lbd backup", "BACKUP")
			waitServes(t, p.client, topo.HTTP, p.web)
			// lbd joins after its first sync: wait for keepalived's next
			// advert (one a second with version 2).
			eventually(t, "lbd to hear keepalived", func() error {
				if st, err := p.vrrpState(0); err != nil || st.Master == "" || st.MasterPriority != 150 || st.Refused != nil {
					return fmt.Errorf("lbd's view of keepalived: %+v (%v)", st, err)
				}
				return nil
			})
			// keepalived stops: lbd takes over.
			if err := ka.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			p.waitRoles(t, "lbd to take over", "MASTER")
			eventually(t, "keepalived's box to give its addresses up", func() error { return p.holds(1, false) })
			waitServes(t, p.client, topo.HTTP, p.web)
		})
	}
}

// TestPairWithKeepalivedAdvertisedVIP: keepalived lists the virtual
// servers' VIP in virtual_ipaddress, as most keepalived configurations do;
// lbd lists it in the instance's addresses too (the service carried by the
// instance, bound on lbd's link): both boxes' adverts carry the same list,
// neither refuses the other's, and they fail over both ways.
func TestPairWithKeepalivedAdvertisedVIP(t *testing.T) {
	v := kaVersions[0] // keepalived's defaults
	p, ka := startMixedPair(t, v, 2, 150, 100, true)
	p.waitRoles(t, "lbd master", "MASTER")
	p.waitKeepalived(t, "keepalived backup", false)
	waitServes(t, p.client, topo.HTTP, p.web)
	if st, _ := p.vrrpState(0); st.Refused != nil {
		t.Errorf("lbd refused keepalived's adverts: %v", st.Refused)
	}
	// keepalived's backup checks the master's list against its own
	// (2.2.7: "ip address associated with VRID 51 not present in MASTER
	// advert", older: "... mismatch actual MASTER advert").
	time.Sleep(3 * time.Second) // three adverts
	if out := ka.Output(); strings.Contains(out, "MASTER advert") {
		t.Errorf("keepalived saw another address list in lbd's adverts:\n%s", out)
	}
	if err := p.boxes[0].proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	p.waitKeepalived(t, "keepalived to take over", true)
	eventually(t, "lbd's box to give its addresses up", func() error { return p.holds(0, false) })
	waitServes(t, p.client, topo.HTTP, p.web)
}
