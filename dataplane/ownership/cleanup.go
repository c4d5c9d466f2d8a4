package ownership

import (
	"errors"
	"fmt"

	"github.com/lbdproject/lbd/dataplane/addrs"
	"github.com/lbdproject/lbd/dataplane/ipvs"
	"github.com/lbdproject/lbd/lvs"
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
	inKernel, err := Read(k, ledger)
	if err != nil {
		return nil, err
	}
	// What the ledger lists but the kernel lacks is forgotten; what fails
	// to go stays owned.
	owned := map[lvs.Key]bool{}
	for _, s := range inKernel {
		if err := k.DeleteService(s.Key); err != nil {
			errs = append(errs, fmt.Errorf("deleting virtual server %s: %w", s.Key, err))
			owned[s.Key] = true
			continue
		}
		done = append(done, "IPVS virtual server "+s.Key.String())
	}
	if err := ledger.SetOwned(owned); err != nil {
		errs = append(errs, fmt.Errorf("recording owned IPVS services: %w", err))
	}
	removed, err := links.DeleteLink(link)
	var foreign *addrs.ForeignLinkError
	if errors.As(err, &foreign) {
		// Someone else's link of lbd's name: leaving it is the job done.
		return append(done, "nothing of interface "+link+": "+foreign.Error()), errors.Join(errs...)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("deleting interface %s: %w", link, err))
	} else if removed {
		done = append(done, "dummy interface "+link+" and its VIPs")
	}
	return done, errors.Join(errs...)
}
