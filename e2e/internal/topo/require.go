package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// RequireEnv, when "1", turns a missing prerequisite into a failure instead
// of a skip. e2e/run.sh sets it, so a harness run can never pass by
// skipping everything.
const RequireEnv = "LBD_E2E_REQUIRE"

// RequireRoot skips (or fails, see RequireEnv) unless we are root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "e2e tests need root; run them with e2e/run.sh")
	}
}

// RequireIPVS skips (or fails, see RequireEnv) unless the kernel has IPVS.
func RequireIPVS(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		missing(t, "the kernel has no IPVS (/proc/net/ip_vs); run the e2e tests with e2e/run.sh, which boots one that has")
	}
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// LBDEnv names the environment variable with the path of the lbd binary
// under test; e2e/run.sh builds ./cmd/lbd and sets it.
const LBDEnv = "LBD_BIN"

// RequireLBD returns the path of the lbd binary under test, or skips (or
// fails, see RequireEnv) when there is none.
func RequireLBD(t testing.TB) string {
	t.Helper()
	path := os.Getenv(LBDEnv)
	if path == "" {
		missing(t, LBDEnv+" is not set; e2e/run.sh builds ./cmd/lbd and sets it")
	} else if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", LBDEnv, err)
	}
	return path
}

// ShareEnv names the environment variable with the guest mount point of
// the directory e2e/run.sh was given in LBD_E2E_SHARE (big files such as a
// Consul binary).
const ShareEnv = "LBD_E2E_SHARE_MOUNT"

// RequireSharedFile returns the path of a file from the LBD_E2E_SHARE
// directory, or skips (or fails, see RequireEnv) when it is not there.
func RequireSharedFile(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv(ShareEnv)
	if dir == "" {
		missing(t, "no shared directory: run e2e/run.sh with LBD_E2E_SHARE=DIR holding "+name)
		return ""
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		missing(t, fmt.Sprintf("%s is not in the shared directory: %v", name, err))
	}
	return path
}
