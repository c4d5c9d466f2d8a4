package ipvs

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// A foreign virtual server is one in the kernel that lbd did not create
// (its ledger does not list it) at a key lbd is asked for: a keepalived's,
// an admin's. lbd never touches it unless the service asks to adopt it:
// it is skipped and reported, and everything else is synced.

// ForeignError reports a virtual server lbd is asked for that exists in
// the kernel and is not lbd's.
type ForeignError struct {
	Service *desired.Service
}

func (e *ForeignError) Error() string {
	return fmt.Sprintf("%s exists in the kernel and was not created by lbd: lbd leaves it alone; "+
		"delete it (ipvsadm -D %s) or set adopt = true on service %s to take it over", location{e.Service}, ipvsadmKey(e.Service.Key), e.Service.Name)
}

// ipvsadmKey is how ipvsadm names a virtual server: -t ADDR:PORT.
func ipvsadmKey(k lvs.Key) string {
	switch {
	case k.IsFWMark():
		return fmt.Sprintf("-f %d", k.FWMark)
	case k.Protocol == lvs.UDP:
		return "-u " + netip.AddrPortFrom(k.Addr, k.Port).String()
	case k.Protocol == lvs.SCTP:
		return "--sctp-service " + netip.AddrPortFrom(k.Addr, k.Port).String()
	}
	return "-t " + netip.AddrPortFrom(k.Addr, k.Port).String()
}

// AdoptAddrs makes the virtual servers on these addresses that lbd is asked
// for lbd's, as if their services asked to adopt them: after an
// unreadable ledger, the VIPs on lbd's own interface (see
// ownership.Recovery). It lasts for the process.
func (a *Applier) AdoptAddrs(addrs map[netip.Addr]bool) { a.adoptAddrs = addrs }

// mayAdopt reports whether a virtual server at s's key that lbd does not own
// may be taken over.
func (a *Applier) mayAdopt(s *desired.Service) bool {
	return s.Adopt || (!s.Key.IsFWMark() && a.adoptAddrs[s.Key.Addr])
}

// conflicted reports s, whose key is foreign as of the last dump, in
// this Apply's result.
func (a *Applier) conflicted(s *desired.Service, res *Result, errs *[]error) {
	res.Failed = append(res.Failed, s.Key)
	*errs = append(*errs, Refused{&ForeignError{s}})
}

// foreignNow marks s's key foreign after adding it found one there, and
// returns the error to report: a refusal, since the cache is still right.
func (a *Applier) foreignNow(s *desired.Service) error {
	if a.foreign == nil {
		a.foreign = map[lvs.Key]bool{}
	}
	a.foreign[s.Key] = true
	return Refused{&ForeignError{s}}
}

// takenAlready reports whether adding s's virtual server failed because
// one exists that lbd did not know of: foreign, unless lbd owned the key
// before this Apply (then the cache was stale, and the next dump reads it).
func (a *Applier) takenAlready(s *desired.Service, err error) bool {
	return errors.Is(err, syscall.EEXIST) && a.fresh[s.Key] && !a.mayAdopt(s)
}
