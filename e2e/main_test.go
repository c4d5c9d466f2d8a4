//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/lbdproject/lbd/e2e/internal/topo"
)

// TestMain first lets the binary act as one of the topology's helper
// programs (a backend, a probe, ...) when it was started as one; see
// topo.RunRoleIfAny. After the tests it checks that they cleaned up.
func TestMain(m *testing.M) {
	runBenchRoleIfAny() // the benchmark's roles (bench_role_test.go)
	topo.RunRoleIfAny()
	code := m.Run()
	if err := topo.CheckCleanup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
