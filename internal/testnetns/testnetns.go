// Package testnetns gives tests a fresh, named network namespace on the
// host, for kernel features the host has (ipsets, iptables, veth); it skips
// the test when it cannot (not root, no iproute2).
package testnetns

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// New creates a namespace, removed when the test ends, and returns its name.
func New(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "lbdt-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, name, "ip", "link", "set", "lo", "up")
	return name
}

// Run runs a command in the namespace and fails the test if it fails.
func Run(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Require skips the test when a tool is missing.
func Require(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/test.sh installs it)", tool)
		}
	}
}
