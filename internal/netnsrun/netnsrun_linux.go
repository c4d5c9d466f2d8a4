// Package netnsrun runs a function inside a network namespace, for the
// packages that open sockets or read /proc/net there (sync daemons,
// connection sync) when driven from outside it (lbd plan, the e2e tests).
package netnsrun

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// Do runs fn on a thread of its own in the network namespace at path
// ("" runs it here). Sockets and files fn opens stay bound to that
// namespace, and /proc/sys/net shows its sysctls. A thread that cannot
// get back to its namespace is thrown away with its goroutine.
func Do(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	target, err := netns.GetFromPath(path)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer target.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else the locked thread ends with this goroutine
		done <- err
	}()
	return <-done
}
