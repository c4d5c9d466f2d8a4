// Package addrs keeps lbd's VIPs bound, as host addresses, to its dummy
// interface, so that the kernel accepts traffic for them and hands it to
// IPVS. lbd owns that interface, and says so in the kernel: the link it
// creates carries lbd's Marker as its alias, and a link of the configured
// name without it (a BGP daemon's dummy0) is refused, never changed.
// Addresses on lbd's link that are not desired VIPs are removed; addresses
// on other interfaces are never touched, and a VIP that already lives on
// another interface is not bound again.
package addrs

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/lbdproject/lbd/internal/errcap"
)

// Marker is the alias (IFLA_IFALIAS, `ip link set X alias ...`) of the
// dummy link lbd creates: the kernel keeps it across restarts of lbd, and
// anyone can read it (`ip link show`). Any alias starting with "lbd:" marks
// a link as lbd's; setting one by hand hands the link to lbd.
const Marker = "lbd: VIPs of the lbd load balancer; managed by lbd"

// IsMarked reports whether a link alias marks the link as lbd's.
func IsMarked(alias string) bool { return strings.HasPrefix(alias, "lbd:") }

// ForeignLinkError is a kernel's refusal to use or delete a link of lbd's
// configured name that lbd did not create: it has no Marker alias.
// Nothing was changed on it.
type ForeignLinkError struct {
	Link string
	// Deleting: the refusal of a cleanup, not of a sync.
	Deleting bool
}

func (e *ForeignLinkError) Error() string {
	if e.Deleting {
		return fmt.Sprintf("interface %s was not created by lbd (its alias does not start with \"lbd:\"): left alone; "+
			"if an older lbd created it, delete it with `ip link del %s`", e.Link, e.Link)
	}
	return fmt.Sprintf("interface %s exists and was not created by lbd: lbd does not touch it. "+
		"Use another [dataplane] interface, delete the link, or hand it to lbd with `ip link set %s alias '%s'`",
		e.Link, e.Link, Marker)
}

// Kernel is the part of the kernel's address table the applier drives.
type Kernel interface {
	// EnsureLink creates the dummy link if missing, marked as lbd's, and
	// sets it up. A link of that name without lbd's mark is refused with
	// a *ForeignLinkError and left as it is.
	EnsureLink(name string) error
	// Dump lists, in one pass, the addresses on link and the addresses on
	// every other interface (with that interface's name).
	Dump(link string) (on []netip.Addr, elsewhere map[netip.Addr]string, err error)
	Add(link string, a netip.Addr) error
	Delete(link string, a netip.Addr) error
}

// Adopter is a Kernel that can mark an existing link as lbd's.
type Adopter interface {
	MarkLink(name string) error
}

// Stats counts the kernel work of one Apply.
type Stats struct {
	Dumps  int
	Writes int
}

// Applier binds VIPs to one dummy interface.
type Applier struct {
	// AdoptUnmarked lets the first sync take over a link of the configured
	// name that has no Marker (one an lbd older than the mark created),
	// marking it, if the Kernel is an Adopter. Set it before the first
	// Apply, only when lbd ran before on this boot: otherwise the link is
	// someone else's.
	AdoptUnmarked bool
	// Log, when set, is told of an adopted link.
	Log *slog.Logger

	k    Kernel
	link string
	// linkOK: EnsureLink accepted the link once; adoption is over.
	linkOK bool
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
		if err := a.ensureLink(); err != nil {
			a.bound = nil
			return st, err
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
	errs := errcap.List{What: "addresses"}
	for _, ip := range vips {
		if _, ok := a.elsewhere[ip]; ok {
			continue // already local on another interface: it works as is
		}
		want[ip] = true
		if a.bound[ip] {
			continue
		}
		st.Writes++
		// EEXIST: bound meanwhile by someone else; the VIP is where it
		// should be, and that race is no failure.
		if err := a.k.Add(a.link, ip); err != nil && !errors.Is(err, syscall.EEXIST) {
			errs.Add(fmt.Errorf("binding VIP %s to %s: %w", ip, a.link, err))
			continue
		}
		a.bound[ip] = true
	}
	for _, ip := range slices.SortedFunc(maps.Keys(a.bound), netip.Addr.Compare) {
		if want[ip] {
			continue
		}
		st.Writes++
		if err := a.k.Delete(a.link, ip); err != nil && !errors.Is(err, syscall.EADDRNOTAVAIL) { // gone already
			errs.Add(fmt.Errorf("unbinding %s from %s: %w", ip, a.link, err))
			continue
		}
		delete(a.bound, ip)
	}
	err := errs.Err()
	if err != nil {
		a.bound = nil // re-read before trusting it again
	} else {
		a.applied = slices.Clip(vips)
	}
	return st, err
}

// ensureLink has the kernel create or check the link. A link without lbd's
// mark is refused (the error says how to fix it), unless the first sync
// may adopt it.
func (a *Applier) ensureLink() error {
	err := a.k.EnsureLink(a.link)
	var foreign *ForeignLinkError
	adopter, canMark := a.k.(Adopter)
	if errors.As(err, &foreign) && a.AdoptUnmarked && !a.linkOK && canMark {
		if err := adopter.MarkLink(a.link); err != nil {
			return fmt.Errorf("dummy interface %s: adopting it: %w", a.link, err)
		}
		if a.Log != nil {
			a.Log.Info("adopted the dummy interface an earlier lbd created, marking it as lbd's", "interface", a.link, "alias", Marker)
		}
		err = a.k.EnsureLink(a.link)
	}
	switch {
	case errors.As(err, &foreign):
		return err // names the interface and the fix
	case err != nil:
		return fmt.Errorf("dummy interface %s: %w", a.link, err)
	}
	a.linkOK = true
	return nil
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
