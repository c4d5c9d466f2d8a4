package vrrp_test

// Interoperability with the real keepalived (Debian's 2.2.7, VRRP only, no
// IPVS needed), run as the peer in namespace B of a link; lbd's sockets are
// in A. keepalived's log (on the console, into a file) says which state it
// is in and why it refused an advert.

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbdproject/lbd/ha/vrrp"
	"github.com/lbdproject/lbd/internal/testnetns"
)

func needKeepalived(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and keepalived")
	}
	if _, err := exec.LookPath("keepalived"); err != nil {
		t.Skip("needs keepalived (apt-get install keepalived; scripts/test.sh installs it)")
	}
}

// kaConf is one keepalived VRRP instance, VI_1, VRID 51, starting as
// BACKUP on vrrpb.
type kaConf struct {
	version    int
	priority   int
	interval   string // advert_int
	pass       string // version 2: auth_type PASS with this password
	vips       []netip.Addr
	unicastSrc netip.Addr // with unicastPeer: unicast instead of multicast
	peer       netip.Addr
}

func (c kaConf) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "global_defs {\n\trouter_id lbdtest\n\tvrrp_version %d\n}\n", c.version)
	fmt.Fprintf(&b, "vrrp_instance VI_1 {\n\tstate BACKUP\n\tinterface %s\n\tvirtual_router_id %d\n", ifB, vrid)
	fmt.Fprintf(&b, "\tpriority %d\n\tadvert_int %s\n", c.priority, c.interval)
	if c.pass != "" {
		fmt.Fprintf(&b, "\tauthentication {\n\t\tauth_type PASS\n\t\tauth_pass %s\n\t}\n", c.pass)
	}
	b.WriteString("\tvirtual_ipaddress {\n")
	for _, v := range c.vips {
		bits := 32
		if v.Is6() {
			bits = 64
		}
		fmt.Fprintf(&b, "\t\t%s/%d\n", v, bits)
	}
	b.WriteString("\t}\n")
	if c.unicastSrc.IsValid() {
		fmt.Fprintf(&b, "\tunicast_src_ip %s\n\tunicast_peer {\n\t\t%s\n\t}\n", c.unicastSrc, c.peer)
	}
	b.WriteString("}\n")
	return b.String()
}

type keepalived struct {
	t   *testing.T
	log string // its console output
}

// startKeepalived runs keepalived in ns until the test ends.
func startKeepalived(t *testing.T, ns string, conf kaConf) *keepalived {
	t.Helper()
	dir := t.TempDir()
	k := &keepalived{t: t, log: filepath.Join(dir, "keepalived.log")}
	cf := filepath.Join(dir, "keepalived.conf")
	if err := os.WriteFile(cf, []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(k.log)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("ip", "netns", "exec", ns, "keepalived", "--vrrp", "--dont-fork", "--log-console",
		"--log-detail", "--no-syslog", "-f", cf, "-p", filepath.Join(dir, "keepalived.pid"),
		"-r", filepath.Join(dir, "vrrp.pid"), "-c", filepath.Join(dir, "checkers.pid"), "-b", filepath.Join(dir, "bfd.pid"))
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, which cleanup kills: keepalived forks its
	// VRRP child. Pdeathsig kills it if the test binary dies; it fires
	// when the thread that started it exits, so that thread is kept,
	// locked, until keepalived exits (inNetns discards threads).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting keepalived: %v", err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // any child left behind
		if t.Failed() {
			t.Logf("keepalived's configuration:\n%s\nits log:\n%s", conf, k.text())
		}
	})
	return k
}

func (k *keepalived) text() string {
	b, err := os.ReadFile(k.log)
	if err != nil {
		k.t.Fatal(err)
	}
	return string(b)
}

// waitLog waits until keepalived logs a line matching re after offset
// from, and returns the offset after that line.
func (k *keepalived) waitLog(from int, re string) int {
	k.t.Helper()
	rx := regexp.MustCompile(re)
	var end int
	eventually(k.t, "keepalived to log "+re, func() bool {
		text := k.text()
		if loc := rx.FindStringIndex(text[min(from, len(text)):]); loc != nil {
			end = from + loc[1]
			return true
		}
		return false
	})
	return end
}

// hasVIP says whether keepalived's interface has v.
func hasVIP(t *testing.T, ns string, v netip.Addr) bool {
	t.Helper()
	return strings.Contains(testnetns.Run(t, ns, "ip", "-o", "addr", "show", "dev", ifB), " "+v.String()+"/")
}

// readKeepalived reads until keepalived's first advert, refusing none.
func readKeepalived(t *testing.T, s *vrrp.Socket) vrrp.Received {
	t.Helper()
	r, before := readUntil(t, s, 20*time.Second, func(r vrrp.Received) bool { return r.Advert.VRID == vrid || r.Err != nil })
	if r.Err != nil || len(before) != 0 {
		t.Fatalf("keepalived's advert was refused: %+v (after %+v)", r, before)
	}
	return r
}

func TestKeepalivedV2Adverts(t *testing.T) {
	needKeepalived(t)
	l := newLink(t)
	s := listenIn(t, l.nsA, ifA, 4)
	startKeepalived(t, l.nsB, kaConf{version: 2, priority: 100, interval: "1", pass: "secret", vips: []netip.Addr{vip4a, vip4b}})
	r := readKeepalived(t, s)
	a := r.Advert
	if a.Version != 2 || a.VRID != vrid || a.Priority != 100 || a.Interval != time.Second ||
		!slices.Equal(a.Addrs, []netip.Addr{vip4a, vip4b}) || a.AuthType != vrrp.AuthPass || a.Password() != "secret" ||
		a.AuthData != [8]byte{'s', 'e', 'c', 'r', 'e', 't'} {
		t.Errorf("keepalived's advert: %+v", a)
	}
	if r.Src != addrB4 || r.Dst != vrrp.Group4 || r.TTL != 255 {
		t.Errorf("keepalived's advert came from %v to %v with TTL %d, want %v to %v with 255", r.Src, r.Dst, r.TTL, addrB4, vrrp.Group4)
	}
}

func TestKeepalivedV3Adverts(t *testing.T) {
	needKeepalived(t)
	for _, c := range []struct {
		name   string
		family int
		conf   kaConf
		dst    netip.Addr
	}{
		{"IPv4 multicast", 4, kaConf{vips: []netip.Addr{vip4a, vip4b}}, vrrp.Group4},
		// Unicast is where keepalived's choice of checksum shows: the
		// pseudo-header holds the peer's address, not the group's.
		{"IPv4 unicast", 4, kaConf{vips: []netip.Addr{vip4a, vip4b}, unicastSrc: addrB4, peer: addrA4}, addrA4},
		{"IPv6 multicast", 6, kaConf{vips: []netip.Addr{vip6}}, vrrp.Group6},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLink(t)
			src := addrB4
			if c.family == 6 {
				src = linkLocal(t, l.nsB, ifB)
			}
			s := listenIn(t, l.nsA, ifA, c.family)
			c.conf.version, c.conf.priority, c.conf.interval = 3, 100, "0.1"
			startKeepalived(t, l.nsB, c.conf)
			r := readKeepalived(t, s)
			a := r.Advert
			if a.Version != 3 || a.VRID != vrid || a.Priority != 100 || a.Interval != 100*time.Millisecond ||
				!slices.Equal(a.Addrs, c.conf.vips) || a.AuthType != vrrp.AuthNone {
				t.Errorf("keepalived's advert: %+v", a)
			}
			if r.Src != src || r.Dst != c.dst || r.TTL != 255 {
				t.Errorf("keepalived's advert came from %v to %v with TTL %d, want %v to %v with 255", r.Src, r.Dst, r.TTL, src, c.dst)
			}
		})
	}
}

// sendEvery calls send every interval until the returned stop is called
// (or the test ends), failing the test on an error.
func sendEvery(t *testing.T, interval time.Duration, send func() error) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			if err := send(); err != nil {
				t.Errorf("sending to keepalived: %v", err)
				return
			}
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}

// complaint is a line of keepalived's about an advert it refused, or
// about a VRRPv3 checksum of the old kind it detected.
var complaint = regexp.MustCompile(`(?im)^.*(invalid|mismatch|unexpected|wrong|too short|too long|checksum).*$`)

// TestKeepalivedTakesOurAdverts: keepalived (priority 100), master alone,
// goes back to BACKUP and drops its addresses when lbd's adverts at
// priority 200 come, and becomes master again when they stop being valid.
func TestKeepalivedTakesOurAdverts(t *testing.T) {
	needKeepalived(t)
	v4 := []netip.Addr{vip4a, vip4b}
	for _, c := range []struct {
		name     string
		family   int
		conf     kaConf
		advert   vrrp.Advert
		dst      netip.Addr
		bad      string // how the invalid adverts are made: "password", "checksum" or none
		refusals string // what keepalived then logs
	}{
		{"v2 PASS", 4, kaConf{version: 2, interval: "1", pass: "secret", vips: v4},
			vrrp.Advert{Version: 2, Interval: time.Second, Addrs: v4}, vrrp.Group4, "password", `received an invalid passwd`},
		{"v3 IPv4 multicast", 4, kaConf{version: 3, interval: "0.1", vips: v4},
			vrrp.Advert{Version: 3, Interval: 100 * time.Millisecond, Addrs: v4}, vrrp.Group4, "checksum", `Invalid VRRPv3 checksum`},
		{"v3 IPv4 unicast", 4, kaConf{version: 3, interval: "0.1", vips: v4, unicastSrc: addrB4, peer: addrA4},
			vrrp.Advert{Version: 3, Interval: 100 * time.Millisecond, Addrs: v4}, addrB4, "checksum", `Invalid VRRPv3 checksum`},
		// keepalived's kernel checks IPv6 checksums (IPV6_CHECKSUM) and
		// drops bad ones unseen: nothing to log, so no negative case.
		{"v3 IPv6 multicast", 6, kaConf{version: 3, interval: "0.1", vips: []netip.Addr{vip6}},
			vrrp.Advert{Version: 3, Interval: 100 * time.Millisecond, Addrs: []netip.Addr{vip6}}, vrrp.Group6, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLink(t)
			src := addrA4
			if c.family == 6 {
				src = linkLocal(t, l.nsA, ifA)
			}
			s := listenIn(t, l.nsA, ifA, c.family)
			c.conf.priority = 100
			k := startKeepalived(t, l.nsB, c.conf)
			at := k.waitLog(0, `\(VI_1\) Entering MASTER STATE`)
			eventually(t, "keepalived to add its addresses", func() bool { return hasVIP(t, l.nsB, c.conf.vips[0]) })

			good := c.advert
			good.VRID, good.Priority = vrid, 200
			if c.conf.pass != "" {
				good.SetPassword(c.conf.pass)
			}
			stop := sendEvery(t, good.Interval, func() error { return s.Send(good, c.dst) })
			at = k.waitLog(at, `\(VI_1\) Entering BACKUP STATE`)
			eventually(t, "keepalived to drop its addresses", func() bool { return !hasVIP(t, l.nsB, c.conf.vips[0]) })
			// Nothing refused, nor taken for the old unicast checksum.
			if line := complaint.FindString(k.text()[:at]); line != "" {
				t.Errorf("keepalived logged %q", line)
			}
			if c.bad == "" {
				return
			}
			stop()
			bad := good
			if c.bad == "password" {
				bad.SetPassword("wrong")
			}
			raw := rawSender(t, l.nsA, ifA, 255, src)
			sendEvery(t, good.Interval, func() error {
				if c.bad == "password" {
					return s.Send(bad, c.dst)
				}
				b, err := bad.Marshal(src, c.dst)
				if err != nil {
					return err
				}
				b[7] ^= 0x55
				return raw(b, c.dst)
			})
			k.waitLog(at, c.refusals)
			k.waitLog(at, `\(VI_1\) Entering MASTER STATE`)
		})
	}
}
