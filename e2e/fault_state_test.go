//go:build e2e

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
	"golang.org/x/sys/unix"
)

// TestFaultState: with the dataplane right and a request stream through
// it, lbd is SIGKILLed and restarted, its state directory turns read-only,
// then full, then its ledger is corrupted under a restart. No request may
// fail; lbd reports each error; a change that needs the ledger waits until
// the directory is writable again, and then the kernel is exactly what lbd
// plan says. The state directory is a tmpfs of its own, mounted before lbd
// starts (lbd's mount namespace from ip netns exec gets a copy of it; a
// remount or a full file system is the same superblock in both).
func TestFaultState(t *testing.T) {
	topo.RequireIPVS(t)
	tp := topo.New(t, topo.Options{RealServers: 2})
	tp.StartBackends(t)
	dir, client := tp.Directors[0], tp.ClientHosts[0]
	f := faultDirector(t, dir)
	state := mountTmpfs(t, "size=1m")
	services := faultServices(t)
	web := netip.AddrPortFrom(topo.VIP(1), 80)
	rs1, rs2 := tp.RealServers[0].Addr(tp.Backend), tp.RealServers[1].Addr(tp.Backend)
	webService := staticWeb(rs1, rs2)
	extra := func(n int) string { // one more service, on VIP n
		return fmt.Sprintf("\n[[service]]\nname = \"extra%d\"\nvips = [\"%s\"]\nport = 80\nsnat = \"never\"\nhealth_check = { type = \"none\" }\nreal_server = [{ address = \"%s\" }]\n",
			n, topo.VIP(n), rs1)
	}
	// 10 s bounds the retry backoff: the wait after a fault is lifted.
	config := func(parts ...string) string { return withSyncPeriod(faultConfig(services, parts...), "10s") }
	l := newLBD(t, dir, state, config(webService))
	l.start()
	waitExact(t, l, l.planView(t), f, "the first sync")
	waitServes(t, client, topo.HTTP, web)

	t.Run("SIGKILL and restart over a correct kernel", func(t *testing.T) {
		underStream(t, client, web, func() {
			l.kill(t)
			first := waitFirstSync(t, l)
			if !strings.Contains(first, "kernel already up to date") {
				t.Errorf("the restart's first sync over a correct kernel wrote: %s", first)
			}
		})
		waitExact(t, l, l.planView(t), f, "the kernel after the restart")
	})

	t.Run("read-only state directory", func(t *testing.T) {
		remount(t, state, unix.MS_RDONLY)
		underStream(t, client, web, func() {
			l.writeConfig(t, config(webService, extra(2)))
			waitSyncError(t, l, "read-only file system")
			notInIPVS(t, dir, topo.VIP(2))
		})
		remount(t, state, 0)
		waitExact(t, l, l.planView(t), f, "the edit applied once the state directory is writable")
	})

	t.Run("full state directory", func(t *testing.T) {
		filler := fill(t, state)
		underStream(t, client, web, func() {
			l.writeConfig(t, config(webService, extra(2), extra(3)))
			waitSyncError(t, l, "no space left on device")
			notInIPVS(t, dir, topo.VIP(3))
		})
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		waitExact(t, l, l.planView(t), f, "the edit applied once the state directory has room")
	})

	t.Run("corrupt ledger, restart", func(t *testing.T) {
		ledger := filepath.Join(state, ledgerName)
		fi, err := os.Stat(ledger)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(ledger, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		underStream(t, client, web, func() {
			l.kill(t)
			l.waitLog(t, "lbd to set the ledger aside", "the ownership ledger was unreadable and is set aside")
			waitFirstSync(t, l)
		})
		want := l.planView(t)
		waitExact(t, l, want, f, "the kernel after the restart with a corrupt ledger")
		aside, _ := filepath.Glob(ledger + ".unreadable-*")
		if len(aside) != 1 {
			t.Errorf("files set aside: %v; want one %s.unreadable-TIME", aside, ledgerName)
		}
		var owned struct{ IPVS []string }
		b, err := os.ReadFile(ledger)
		if err == nil {
			err = json.Unmarshal(b, &owned)
		}
		if err != nil || len(owned.IPVS) != countVS(want["ipvs"]) {
			t.Errorf("the new ledger lists %d virtual servers (%v), want all %d of lbd's", len(owned.IPVS), err, countVS(want["ipvs"]))
		}
	})
}

// staticWeb is the service web on topo.VIP(1):80 with real servers on
// port 80 of the given addresses.
func staticWeb(reals ...netip.Addr) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[service]]\nname = \"web\"\nvips = [\"%s\"]\nport = 80\nscheduler = \"rr\"\nsnat = \"never\"\nhealth_check = { type = \"none\" }\nreal_server = [\n", topo.VIP(1))
	for _, rs := range reals {
		fmt.Fprintf(&b, "  { address = \"%s\" },\n", rs)
	}
	b.WriteString("]\n")
	return b.String()
}

func countVS(ipvs []string) int {
	n := 0
	for _, l := range ipvs {
		if strings.HasPrefix(l, "-A ") {
			n++
		}
	}
	return n
}

// underStream runs fault while a client sends a stream of requests to
// target (at least a few before and after it), and fails the test if any
// of them failed.
func underStream(t *testing.T, client *topo.Node, target netip.AddrPort, fault func()) {
	t.Helper()
	as := streamAround(t, client, target, fault)
	if errs := as.Errors(); len(errs) > 0 {
		t.Errorf("%d of %d requests failed, first: %s", len(errs), len(as), errs[0])
	}
}

// streamAround runs fault while a client sends a stream of requests to
// target, at least a few before and after it, and returns the answers.
func streamAround(t *testing.T, client *topo.Node, target netip.AddrPort, fault func()) topo.Answers {
	t.Helper()
	s := client.StartStream(t, topo.HTTP, target, requestTimeout)
	s.WaitAnswers(t, 5, settleLimit)
	fault()
	as, err := s.Answers()
	if err != nil {
		t.Fatal(err)
	}
	s.WaitAnswers(t, len(as)+5, settleLimit)
	as = s.Stop(t)
	t.Logf("request stream through %s: %s", target, as.Summary())
	return as
}

// waitFirstSync waits until the running lbd has logged its first sync and
// returns what it logged.
func waitFirstSync(t *testing.T, l *lbd) string {
	t.Helper()
	var first string
	poll.Until(t, "the restarted lbd's first sync", convergeLimit, func() error {
		if first = firstSync(l.proc.Output()); first == "none logged" {
			return errors.New("no sync logged yet")
		}
		return nil
	})
	return first
}

// waitSyncError waits until lbd status reports a failed sync with text in
// its error, and lbd's log says it too.
func waitSyncError(t *testing.T, l *lbd, text string) {
	t.Helper()
	eventually(t, "lbd status to report "+text, func() error {
		out, err := l.dir.Exec(l.bin, "status", "--socket", l.socket())
		if err != nil {
			return err
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "sync:") && strings.Contains(line, "FAILED") && strings.Contains(line, text) {
				t.Logf("lbd status: %s", line)
				return nil
			}
		}
		head, _, _ := strings.Cut(out, "\n\n")
		return fmt.Errorf("lbd status:\n%s", head)
	})
	if !strings.Contains(l.proc.Output(), text) {
		t.Errorf("lbd's log does not say %q", text)
	}
}

// notInIPVS fails the test if a virtual server of vip is in IPVS: lbd may
// not create what its ledger cannot list.
func notInIPVS(t *testing.T, dir *topo.Director, vip netip.Addr) {
	t.Helper()
	for _, l := range ipvsadmSave(t, dir) {
		if strings.Contains(l, vip.String()+":") {
			t.Errorf("IPVS has %q, which lbd could not record in its ledger", l)
		}
	}
}

// mountTmpfs mounts a tmpfs with the given options on a new directory,
// unmounted when the test ends.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// remount changes a tmpfs's flags (unix.MS_RDONLY or 0): the superblock's,
// so every mount namespace's copy of it changes.
func remount(t *testing.T, dir string, flags uintptr) {
	t.Helper()
	if err := unix.Mount("none", dir, "", unix.MS_REMOUNT|flags, ""); err != nil {
		t.Fatalf("remounting %s: %v", dir, err)
	}
}

// fill writes a file into dir until the file system is full and returns
// its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	fh, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	block := make([]byte, 4096)
	for range 1 << 16 { // at most 256 MiB: the file system is far smaller
		if _, err = fh.Write(block); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
	return path
}
