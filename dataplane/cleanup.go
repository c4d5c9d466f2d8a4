package dataplane

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
)

// LinkDeleter removes lbd's dummy interface.
type LinkDeleter interface {
	DeleteLink(name string) (bool, error)
}

// Cleanup removes everything lbd created and nothing else: the virtual
// servers its ledger owns, then its dummy interface with the VIPs on it.
// It returns what it removed, one line each.
func Cleanup(k ipvs.Kernel, ledger ipvs.Ledger, links LinkDeleter, link string) ([]string, error) {
	var done []string
	var errs []error
	owned, err := ledger.Owned()
	if err != nil {
		return nil, fmt.Errorf("reading owned IPVS services: %w", err)
	}
	dump, err := k.Dump()
	if err != nil {
		return nil, fmt.Errorf("dumping IPVS: %w", err)
	}
	inKernel := map[desired.Key]bool{}
	for _, s := range dump {
		inKernel[s.Key] = true
	}
	for _, key := range slices.SortedFunc(maps.Keys(owned), desired.Key.Compare) {
		if !inKernel[key] {
			delete(owned, key)
			continue
		}
		if err := k.DeleteService(key); err != nil {
			errs = append(errs, fmt.Errorf("deleting virtual server %s: %w", key, err))
			continue
		}
		delete(owned, key)
		done = append(done, "IPVS virtual server "+key.String())
	}
	if err := ledger.SetOwned(owned); err != nil {
		errs = append(errs, fmt.Errorf("recording owned IPVS services: %w", err))
	}
	removed, err := links.DeleteLink(link)
	if err != nil {
		errs = append(errs, fmt.Errorf("deleting interface %s: %w", link, err))
	} else if removed {
		done = append(done, "dummy interface "+link+" and its VIPs")
	}
	return done, errors.Join(errs...)
}
