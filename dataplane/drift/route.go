package drift

import (
	"encoding/binary"
	"net/netip"

	"github.com/lbdproject/lbd/dataplane/genl"
)

// rtnetlink notifications (linux/rtnetlink.h, linux/if_link.h,
// linux/if_addr.h), in host byte order.
const (
	rtmNewLink = 16
	rtmDelLink = 17
	rtmNewAddr = 20
	rtmDelAddr = 21

	rtnlgrpLink       = 1
	rtnlgrpIPv4Ifaddr = 5
	rtnlgrpIPv6Ifaddr = 9

	ifinfomsgLen = 16 // family, pad, type, index, flags, change
	ifaddrmsgLen = 8  // family, prefixlen, flags, scope, index
	iflaIfname   = 3
	ifaAddress   = 1
	ifaLocal     = 2
	iffUp        = 1
)

// linkState is what the latest event said of lbd's link.
type linkState uint8

const (
	stateUp linkState = iota + 1
	stateDown
	stateGone // deleted, or renamed away
)

// routeEvents follows lbd's link and its addresses through rtnetlink
// notifications. It gathers a window of them, then its verdict compares
// where they left each address with what lbd expects: lbd's own writes
// (binding or unbinding a VIP, creating the link and setting it up) leave
// everything as expected, whatever the order the events arrive in.
type routeEvents struct {
	name  string
	index int32 // the link's index; 0 when unknown or gone
	// link and addrs are the window's latest link event (0: none) and,
	// per address on the link, whether the latest event left it bound.
	link  linkState
	addrs map[netip.Addr]bool
	// up is whether the link was up as of the last verdict: only an up
	// link going down is drift. A link that appears down is lbd creating
	// it (the kernel creates links down; lbd then sets it up, which under
	// load may come a window later).
	up bool
}

// newRouteEvents follows the link name, whose index is 0 when it does not
// exist; an existing one is taken to be up, as lbd keeps it.
func newRouteEvents(name string, index int32) *routeEvents {
	return &routeEvents{name: name, index: index, addrs: map[netip.Addr]bool{}, up: index != 0}
}

// message takes one notification; it reports whether the window now
// holds something to judge.
func (r *routeEvents) message(m genl.Message) bool {
	switch m.Type {
	case rtmNewLink, rtmDelLink:
		return r.linkMessage(m.Type == rtmDelLink, m.Payload)
	case rtmNewAddr, rtmDelAddr:
		return r.addrMessage(m.Type == rtmNewAddr, m.Payload)
	}
	return false
}

func (r *routeEvents) linkMessage(deleted bool, b []byte) bool {
	if len(b) < ifinfomsgLen {
		return false
	}
	index := int32(binary.NativeEndian.Uint32(b[4:]))
	flags := binary.NativeEndian.Uint32(b[8:])
	name := ""
	for t, v := range genl.Attrs(b[ifinfomsgLen:]) {
		if t == iflaIfname {
			name = cString(v)
		}
	}
	switch {
	case name == r.name && !deleted:
		r.index = index
		r.link = stateDown
		if flags&iffUp != 0 {
			r.link = stateUp
		}
	case name == r.name || (r.index != 0 && index == r.index):
		// Deleted, or renamed: the name lbd binds VIPs to is gone.
		r.index, r.link = 0, stateGone
	default:
		return false
	}
	return true
}

func (r *routeEvents) addrMessage(bound bool, b []byte) bool {
	if len(b) < ifaddrmsgLen || r.index == 0 || int32(binary.NativeEndian.Uint32(b[4:])) != r.index {
		return false
	}
	var local, address []byte
	for t, v := range genl.Attrs(b[ifaddrmsgLen:]) {
		switch t {
		case ifaLocal:
			local = v
		case ifaAddress:
			address = v
		}
	}
	if local == nil { // IPv6 has IFA_ADDRESS only
		local = address
	}
	a, ok := netip.AddrFromSlice(local)
	if !ok || a.Unmap().IsLinkLocalUnicast() { // the kernel's own fe80::
		return false
	}
	r.addrs[a.Unmap()] = bound
	return true
}

// verdict judges the window and starts a new one. expect (nil: addresses
// are not judged) says whether lbd accounts for an address being bound or
// not. A deleted link is one finding; otherwise a link set down, and the
// addresses found removed or added against expect, one finding each with
// how many more there were.
func (r *routeEvents) verdict(expect func(a netip.Addr, bound bool) bool) []finding {
	link, addrs, wasUp := r.link, r.addrs, r.up
	r.link, r.addrs = 0, map[netip.Addr]bool{}
	if link != 0 {
		r.up = link == stateUp
	}
	if link == stateGone {
		return []finding{{kind: linkGone, link: r.name}}
	}
	var out []finding
	if link == stateDown && wasUp {
		out = append(out, finding{kind: linkDown, link: r.name})
	}
	if expect == nil {
		return out
	}
	removed := finding{kind: addrRemoved, link: r.name, more: -1}
	added := finding{kind: addrAdded, link: r.name, more: -1}
	for a, bound := range addrs {
		if expect(a, bound) {
			continue
		}
		f := &removed
		if bound {
			f = &added
		}
		if !f.addr.IsValid() || a.Less(f.addr) { // the lowest, for a stable log
			f.addr = a
		}
		f.more++
	}
	for _, f := range []finding{removed, added} {
		if f.addr.IsValid() {
			out = append(out, f)
		}
	}
	return out
}
