// Package addrs keeps lbd's VIPs bound, as host addresses, to its dummy
// interface, so that the kernel accepts traffic for them and hands it to
// IPVS. lbd owns that interface: addresses on it that are not desired VIPs
// are removed; addresses on other interfaces are never touched, and a VIP
// that already lives on another interface is not bound again.
package addrs

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
)

// Kernel is the part of the kernel's address table the applier drives.
type Kernel interface {
	// EnsureLink creates the dummy link if missing and sets it up.
	EnsureLink(name string) error
	// Dump lists, in one pass, the addresses on link and the addresses on
	// every other interface (with that interface's name).
	Dump(link string) (on []netip.Addr, elsewhere map[netip.Addr]string, err error)
	Add(link string, a netip.Addr) error
	Delete(link string, a netip.Addr) error
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps  int
	Writes int
}

// Applier binds VIPs to one dummy interface.
type Applier struct {
	k    Kernel
	link string
	// bound is what is on the link as far as the applier knows; nil until
	// the first dump and after a failed write.
	bound     map[netip.Addr]bool
	elsewhere map[netip.Addr]string
	// applied is the list last applied without error, while bound is
	// trusted: a requested sync with the same list has nothing to do.
	applied []netip.Addr
}

// New returns an Applier for the dummy interface named link.
func New(k Kernel, link string) *Applier { return &Applier{k: k, link: link} }

// Apply binds vips and unbinds every other address of the link. With full,
// it re-reads the kernel first (repairing deleted addresses or a deleted
// link).
func (a *Applier) Apply(vips []netip.Addr, full bool) (Stats, error) {
	var st Stats
	if !full && a.bound != nil && a.applied != nil && slices.Equal(vips, a.applied) {
		return st, nil
	}
	a.applied = nil
	if full || a.bound == nil {
		if err := a.k.EnsureLink(a.link); err != nil {
			return st, fmt.Errorf("dummy interface %s: %w", a.link, err)
		}
		on, elsewhere, err := a.k.Dump(a.link)
		st.Dumps++
		if err != nil {
			a.bound = nil
			return st, fmt.Errorf("listing addresses: %w", err)
		}
		a.bound = make(map[netip.Addr]bool, len(on))
		for _, ip := range on {
			if !ip.IsLinkLocalUnicast() { // the kernel's own fe80:: address
				a.bound[ip] = true
			}
		}
		a.elsewhere = elsewhere
	}
	want := make(map[netip.Addr]bool, len(vips))
	var errs []error
	for _, ip := range vips {
		if _, ok := a.elsewhere[ip]; ok {
			continue // already local on another interface: it works as is
		}
		want[ip] = true
		if a.bound[ip] {
			continue
		}
		st.Writes++
		if err := a.k.Add(a.link, ip); err != nil {
			errs = append(errs, fmt.Errorf("binding VIP %s to %s: %w", ip, a.link, err))
			continue
		}
		a.bound[ip] = true
	}
	for _, ip := range slices.SortedFunc(maps.Keys(a.bound), netip.Addr.Compare) {
		if want[ip] {
			continue
		}
		st.Writes++
		if err := a.k.Delete(a.link, ip); err != nil {
			errs = append(errs, fmt.Errorf("unbinding %s from %s: %w", ip, a.link, err))
			continue
		}
		delete(a.bound, ip)
	}
	if len(errs) > 0 {
		a.bound = nil // re-read before trusting it again
	} else {
		a.applied = slices.Clip(vips)
	}
	return st, errors.Join(errs...)
}

// Elsewhere returns the VIPs that were left alone because another
// interface holds them, with that interface's name.
func (a *Applier) Elsewhere(vips []netip.Addr) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, ip := range vips {
		if name, ok := a.elsewhere[ip]; ok {
			out[ip] = name
		}
	}
	return out
}
