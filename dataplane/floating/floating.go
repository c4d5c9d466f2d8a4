// Package floating keeps the failover pair's floating addresses
// (keepalived's virtual_ipaddress) on the box's own links: bound while
// this box is master of their VRRP instance, removed while it is not.
// Unlike the VIPs on lbd's dummy link, these live on links lbd does not
// own (the outside and inside interfaces), so the applier touches only the
// addresses the configuration names, and nothing else on those links.
package floating

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/lbdproject/lbd/dataplane/desired"
)

// Kernel is the part of the address table the applier drives.
type Kernel interface {
	// Addrs lists the addresses (with prefix length) on link.
	Addrs(link string) ([]netip.Prefix, error)
	Add(link string, p netip.Prefix) error
	Delete(link string, p netip.Prefix) error
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps, Writes int
}

// Applier binds and removes floating addresses.
type Applier struct {
	k Kernel
	// last is what the latest Apply left, for the syncs that are not
	// full: they write what changed against it without reading the kernel.
	last []desired.Floating
	ok   bool // last was applied without error
}

// New returns an Applier over k.
func New(k Kernel) *Applier { return &Applier{k: k} }

// Apply makes the kernel hold fl: every address not held bound on its
// link, every held one absent. With full, or after a failure, it reads
// each link first and repairs what differs (drift).
func (a *Applier) Apply(fl []desired.Floating, full bool) (Stats, error) {
	var st Stats
	if !full && a.ok && slices.Equal(fl, a.last) {
		return st, nil
	}
	byLink := map[string][]desired.Floating{}
	var links []string
	for _, f := range fl {
		if _, ok := byLink[f.Link]; !ok {
			links = append(links, f.Link)
		}
		byLink[f.Link] = append(byLink[f.Link], f)
	}
	var errs []error
	for _, link := range links {
		// A takeover is on the clock: what the last Apply left is known,
		// so write the change without reading the link first.
		if !full && a.ok && a.applyChanged(link, byLink[link], &st) {
			continue
		}
		errs = append(errs, a.applyLink(link, byLink[link], &st))
	}
	err := errors.Join(errs...)
	a.last, a.ok = slices.Clone(fl), err == nil
	return st, err
}

// applyChanged writes the addresses of link whose held flag changed since
// the last Apply (which succeeded), and reports whether that was enough:
// not when an address is new to the applier, or a write failed (the
// caller then reads the link and repairs).
func (a *Applier) applyChanged(link string, fl []desired.Floating, st *Stats) bool {
	was := make([]desired.Floating, len(fl))
	for i, f := range fl {
		j := slices.IndexFunc(a.last, func(l desired.Floating) bool { return l.Link == f.Link && l.Prefix == f.Prefix })
		if j < 0 {
			return false
		}
		was[i] = a.last[j]
	}
	for i, f := range fl {
		if f.Held == was[i].Held {
			continue
		}
		st.Writes++
		write := a.k.Add
		if f.Held {
			write = a.k.Delete
		}
		if err := write(link, f.Prefix); err != nil {
			return false
		}
	}
	return true
}

func (a *Applier) applyLink(link string, fl []desired.Floating, st *Stats) error {
	have, err := a.k.Addrs(link)
	st.Dumps++
	if err != nil {
		return fmt.Errorf("floating addresses on %s: %w", link, err)
	}
	var errs []error
	for _, f := range fl {
		// The address counts whatever its prefix length: one bound by hand
		// as /32 is still the address.
		present := slices.ContainsFunc(have, func(p netip.Prefix) bool { return p.Addr() == f.Prefix.Addr() })
		switch {
		case !f.Held && !present:
			st.Writes++
			if err := a.k.Add(link, f.Prefix); err != nil {
				errs = append(errs, fmt.Errorf("binding floating address %s on %s: %w", f.Prefix, link, err))
			}
		case f.Held && present:
			st.Writes++
			i := slices.IndexFunc(have, func(p netip.Prefix) bool { return p.Addr() == f.Prefix.Addr() })
			if err := a.k.Delete(link, have[i]); err != nil {
				errs = append(errs, fmt.Errorf("removing floating address %s from %s: %w", f.Prefix, link, err))
			}
		}
	}
	return errors.Join(errs...)
}
