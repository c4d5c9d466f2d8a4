package consultest

import "syscall"

// sysProcAttr makes the kernel kill the agent if the test process dies
// without its cleanups (a panic, a -timeout): no agent outlives its test
// binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
