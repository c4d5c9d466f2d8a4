// Package fakeaddrs is a strict in-memory address table for tests: it
// refuses to add an address twice or delete a missing one, as the kernel
// does, and counts every call.
package fakeaddrs

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/lbdproject/lbd/dataplane/addrs"
)

// Kernel maps interface names to their addresses.
type Kernel struct {
	mu    sync.Mutex
	Links map[string]map[netip.Addr]bool
	// Unmarked names the links of Links that lbd did not create (no
	// Marker alias): EnsureLink and DeleteLink refuse them, MarkLink
	// adopts them. The links EnsureLink creates are marked.
	Unmarked      map[string]bool
	Dumps, Writes int
}

var (
	_ addrs.Kernel  = (*Kernel)(nil)
	_ addrs.Adopter = (*Kernel)(nil)
)

func (k *Kernel) EnsureLink(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.Unmarked[name] {
		return &addrs.ForeignLinkError{Link: name}
	}
	if k.Links == nil {
		k.Links = map[string]map[netip.Addr]bool{}
	}
	if k.Links[name] == nil {
		k.Links[name] = map[netip.Addr]bool{}
	}
	return nil
}

func (k *Kernel) Dump(link string) ([]netip.Addr, map[netip.Addr]string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Dumps++
	var on []netip.Addr
	elsewhere := map[netip.Addr]string{}
	for name, as := range k.Links {
		for a := range as {
			if name == link {
				on = append(on, a)
			} else {
				elsewhere[a] = name
			}
		}
	}
	return on, elsewhere, nil
}

func (k *Kernel) Add(link string, a netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	l, ok := k.Links[link]
	if !ok {
		return fmt.Errorf("link %s: %w", link, syscall.ENODEV)
	}
	if l[a] {
		return fmt.Errorf("%s on %s: %w", a, link, syscall.EEXIST)
	}
	l[a] = true
	return nil
}

func (k *Kernel) Delete(link string, a netip.Addr) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if !k.Links[link][a] {
		return fmt.Errorf("%s on %s: %w", a, link, syscall.EADDRNOTAVAIL)
	}
	delete(k.Links[link], a)
	return nil
}

// String lists the links and their addresses, sorted.
func (k *Kernel) String() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(k.Links)) {
		var as []string
		for _, a := range slices.SortedFunc(maps.Keys(k.Links[name]), netip.Addr.Compare) {
			as = append(as, a.String())
		}
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(as, " "))
	}
	return b.String()
}

// MarkLink marks an existing link as lbd's.
func (k *Kernel) MarkLink(name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.Writes++
	if _, ok := k.Links[name]; !ok {
		return fmt.Errorf("link %s: %w", name, syscall.ENODEV)
	}
	delete(k.Unmarked, name)
	return nil
}

// DeleteLink removes a link of lbd's and its addresses.
func (k *Kernel) DeleteLink(name string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.Links[name]; !ok {
		return false, nil
	}
	if k.Unmarked[name] {
		return false, &addrs.ForeignLinkError{Link: name, Deleting: true}
	}
	k.Writes++
	delete(k.Links, name)
	return true, nil
}

// Counts returns how many dumps and writes the kernel has seen.
func (k *Kernel) Counts() (dumps, writes int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.Dumps, k.Writes
}
