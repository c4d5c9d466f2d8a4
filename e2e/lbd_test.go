//go:build e2e

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/poll"
	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// lbd is one lbd daemon running in a director namespace, with its
// configuration in a directory of its own.
type lbd struct {
	// owner is the test that started lbd: restarts belong to it too, so
	// that lbd outlives the subtest that restarted it.
	owner    *testing.T
	bin      string
	dir      *topo.Director
	cfgPath  string
	stateDir string
	proc     *topo.Process
}

// startLBD writes config as lbd.toml and starts `lbd run` on the director.
func startLBD(t *testing.T, dir *topo.Director, config string) *lbd {
	t.Helper()
	root := t.TempDir()
	l := &lbd{
		owner:    t,
		bin:      topo.RequireLBD(t),
		dir:      dir,
		cfgPath:  filepath.Join(root, "etc", "lbd.toml"),
		stateDir: filepath.Join(root, "run"),
	}
	if err := os.MkdirAll(filepath.Dir(l.cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	l.writeConfig(t, config)
	l.start()
	return l
}

// kill ends lbd with SIGKILL (it cleans nothing up) and starts it again.
func (l *lbd) kill(t *testing.T) {
	t.Helper()
	if err := l.proc.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	l.start()
}

// waitLog polls until the running lbd has logged text.
func (l *lbd) waitLog(t *testing.T, what, text string) {
	t.Helper()
	eventually(t, what, func() error {
		if !strings.Contains(l.proc.Output(), text) {
			return fmt.Errorf("no %q in lbd's log:\n%s", text, l.proc.Output())
		}
		return nil
	})
}

// socket is the status socket: the configuration's default, /run/lbd,
// would be shared by every lbd of the guest, so tests give each its own.
func (l *lbd) socket() string { return filepath.Join(l.stateDir, "lbd.sock") }

// start starts (or, after a kill, restarts) the daemon.
func (l *lbd) start() {
	l.proc = l.dir.Start(l.owner, "lbd", l.bin, "run", "-c", l.cfgPath, "--state-dir", l.stateDir, "--log-level", "debug")
}

// writeConfig replaces the configuration the way editors do: a new file
// renamed over the old one. It adds a [status] table with this lbd's own
// socket.
func (l *lbd) writeConfig(t *testing.T, config string) {
	t.Helper()
	socket := fmt.Sprintf("\n[status]\nsocket = %q\n", l.socket())
	if strings.Contains(config, "\n[status]\n") {
		config = strings.Replace(config, "\n[status]\n", socket, 1)
	} else {
		config += socket
	}
	tmp := l.cfgPath + ".new"
	if err := os.WriteFile(tmp, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, l.cfgPath); err != nil {
		t.Fatal(err)
	}
}

// plan returns what `lbd plan` says IPVS should hold, as sorted
// ipvsadm -Sn lines.
func (l *lbd) plan(t *testing.T) []string {
	t.Helper()
	out := l.dir.MustExec(t, l.bin, "plan", l.cfgPath)
	ipvsPart, _, _ := strings.Cut(out, "\n# VIPs")
	return sortedLines(strings.TrimPrefix(ipvsPart, "# IPVS (ipvsadm -Sn)\n"))
}

// waitIPVS polls until ipvsadm -Sn on the director holds exactly want.
func waitIPVS(t *testing.T, dir *topo.Director, what string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	poll.Until(t, what, settleLimit, func() error {
		got := ipvsadmSave(t, dir)
		if !slices.Equal(got, want) {
			return fmt.Errorf("ipvsadm -Sn:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		return nil
	})
}

// waitRules polls until ipvsadm -Sn on the director has every line of
// want; a line starting with "!" is a fragment no line may contain.
func waitRules(t *testing.T, dir *topo.Director, what string, want ...string) {
	t.Helper()
	eventually(t, what, func() error {
		got := ipvsadmSave(t, dir)
		for _, w := range want {
			if frag, ok := strings.CutPrefix(w, "!"); ok {
				if slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, frag) }) {
					return fmt.Errorf("ipvsadm -Sn still has %q:\n%s", frag, strings.Join(got, "\n"))
				}
			} else if !slices.Contains(got, w) {
				return fmt.Errorf("ipvsadm -Sn lacks %q:\n%s", w, strings.Join(got, "\n"))
			}
		}
		return nil
	})
}

// vipsOn returns the addresses on the director's lbd0.
func vipsOn(t *testing.T, dir *topo.Director) []string {
	t.Helper()
	out, err := dir.Exec("ip", "-o", "addr", "show", "dev", topo.VIPLink)
	if err != nil {
		return nil
	}
	var addrs []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if (f[i] == "inet" || f[i] == "inet6") && !strings.HasPrefix(f[i+1], "fe80:") {
				addrs = append(addrs, f[i+1])
			}
		}
	}
	slices.Sort(addrs)
	return addrs
}

func sortedLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// probeOK sends n requests and fails the test on any error.
func probeOK(t *testing.T, n *topo.Node, proto topo.Proto, target netip.AddrPort, count int) topo.Answers {
	t.Helper()
	answers, err := n.Probe(proto, target, count, requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if errs := answers.Errors(); len(errs) > 0 {
		t.Fatalf("%d of %d %s requests to %s failed, first: %s", len(errs), count, proto, target, errs[0])
	}
	return answers
}

// waitServes polls until one request to target succeeds.
func waitServes(t *testing.T, n *topo.Node, proto topo.Proto, target netip.AddrPort) {
	t.Helper()
	poll.Until(t, fmt.Sprintf("%s %s to answer", proto, target), settleLimit, func() error {
		answers, err := n.Probe(proto, target, 1, requestTimeout)
		if err != nil {
			return err
		}
		if errs := answers.Errors(); len(errs) > 0 {
			return fmt.Errorf("%s", errs[0])
		}
		return nil
	})
}

// sinceLog returns lbd's output after the first len(mark) bytes.
func sinceLog(p *topo.Process, mark int) string {
	out := p.Output()
	if mark > len(out) {
		return ""
	}
	return out[mark:]
}

// eventually is a short alias for polling a condition with the standard limit.
func eventually(t *testing.T, what string, cond func() error) {
	t.Helper()
	poll.Until(t, what, settleLimit, cond)
}

// demoMode reports whether scripts/demo.sh asked for the demo's full output.
func demoMode() bool { return os.Getenv("LBD_E2E_DEMO") == "1" }
