package ownership

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"
)

// Recovery is what lbd does when its ledger is unreadable: the file is
// set aside for the admin, a new ledger starts empty, and until it has
// been rebuilt lbd takes the safe side. Nothing the ledger would have
// listed is deleted (lbd owns nothing it did not create in this run),
// and a virtual server in the kernel that the configuration asks for is
// treated as lbd's only when its VIP is on lbd's own interface (VIPs):
// lbd put those there. Any other one is foreign: left alone and reported.
type Recovery struct {
	// Aside is where the unreadable file now is.
	Aside string
	// Cause is why it could not be read.
	Cause error
	// VIPs are the addresses on lbd's interface when the ledger was
	// found unreadable.
	VIPs map[netip.Addr]bool
}

// Recover checks the ledger before the first sync. A readable or missing
// ledger needs nothing (nil, nil). An unreadable one is renamed aside and
// described; vips lists the addresses on lbd's own interface. Any other
// error (the state directory unreadable, say) is returned: syncs would
// fail on it too, and saying so is all lbd can do.
func (l FileLedger) Recover(vips func() ([]netip.Addr, error), now time.Time) (*Recovery, error) {
	_, err := l.Owned()
	var bad *UnreadableError
	if !errors.As(err, &bad) {
		return nil, err
	}
	r := &Recovery{Aside: l.Path + ".unreadable-" + now.UTC().Format("20060102T150405Z"), Cause: bad.Err, VIPs: map[netip.Addr]bool{}}
	if err := os.Rename(l.Path, r.Aside); err != nil {
		return nil, fmt.Errorf("setting the unreadable ownership ledger aside: %w", err)
	}
	addrs, err := vips()
	if err != nil {
		// Without the VIPs every virtual server asked for that exists is
		// foreign: safe, and reported.
		return r, fmt.Errorf("listing the VIPs on lbd's interface: %w", err)
	}
	for _, a := range addrs {
		r.VIPs[a] = true
	}
	return r, nil
}
