package realserver

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/lvs"
)

// Status is an item's verdict.
type Status uint8

const (
	OK   Status = iota
	Warn        // breaks DR or TUN, but setup does not touch it
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "fail"
}

// MarshalText writes s by name.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Item is one check's verdict.
type Item struct {
	Check  string
	Status Status
	Detail string
	// Fix is what setup does about it; Hint a command it leaves to the
	// admin (it would remove something setup did not add).
	Fix  []Action
	Hint string
}

// Commands are the commands that fix the item, setup's first.
func (it Item) Commands() []string {
	var out []string
	for _, a := range it.Fix {
		out = append(out, a.Command())
	}
	if it.Hint != "" {
		out = append(out, it.Hint)
	}
	return out
}

// Report is every check's verdict, in the order they were made.
type Report struct {
	Items []Item
}

// OK reports whether no item fails (warnings do not count).
func (r Report) OK() bool {
	for _, it := range r.Items {
		if it.Status == Fail {
			return false
		}
	}
	return true
}

// Count returns how many items have status s.
func (r Report) Count(s Status) int {
	n := 0
	for _, it := range r.Items {
		if it.Status == s {
			n++
		}
	}
	return n
}

// Fixes are the actions of every failing item, once each, in the order
// Setup applies them.
func (r Report) Fixes() []Action {
	var out []Action
	for _, it := range r.Items {
		for _, a := range it.Fix {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Action) int { return int(a.Kind) - int(b.Kind) })
	return out
}

// Check judges st against s. It has no I/O: the same snapshot gives the
// same report.
func Check(s Spec, st State) Report {
	c := checker{spec: s, st: st}
	v4, v6 := s.families()
	c.loopbackUp()
	if s.Method == lvs.Tunnel {
		if v4 {
			c.tunnel(false)
		}
		if v6 {
			c.tunnel(true)
		}
	}
	if v4 {
		// ARP is IPv4's; IPv6 needs nothing more than the VIP on lo: the
		// kernel answers a neighbour solicitation only for an address
		// bound on the interface that received it (ndisc_recv_ns looks
		// the target up strictly on that device), and picks a source on
		// the outgoing interface for its own solicitations.
		c.arp()
		if s.Method == lvs.Tunnel {
			c.rpFilter()
		}
	}
	for _, v := range s.VIPs {
		c.vip(v)
	}
	for _, v := range s.VIPs {
		c.elsewhere(v)
	}
	return Report{Items: c.items}
}

type checker struct {
	spec  Spec
	st    State
	items []Item
}

func (c *checker) ok(check, detail string) {
	c.items = append(c.items, Item{Check: check, Status: OK, Detail: detail})
}

func (c *checker) fail(check, detail string, fix ...Action) {
	c.items = append(c.items, Item{Check: check, Status: Fail, Detail: detail, Fix: fix})
}

func (c *checker) loopbackUp() {
	l, ok := c.st.link(loopback)
	switch {
	case !ok:
		c.fail("lo is up", "the box has no lo")
	case !l.Up:
		c.fail("lo is up", "lo is down: addresses on it are unusable", Action{Kind: LinkUp, Link: loopback})
	default:
		c.ok("lo is up", "up")
	}
}

// tunnel checks the device that decapsulates one family's packets and,
// for GUE, the fou port in front of it.
func (c *checker) tunnel(v6 bool) {
	dev, module := c.spec.tunnelDevice(v6)
	check := dev + " is up"
	l, ok := c.st.link(dev)
	switch {
	case !ok:
		detail := fmt.Sprintf("%s is missing: the %s module makes it", dev, module)
		if n, _ := c.st.sysctl(fbTunnelsKey); n != 0 {
			detail += fmt.Sprintf(", but %s=%d keeps it out of namespaces other than the first", sysctlName(fbTunnelsKey), n)
		}
		c.fail(check, detail, Action{Kind: LoadModule, Module: module})
	case !l.Up:
		// The kernel's tunnel lookup skips a device that is down, and the
		// packet is dropped.
		c.fail(check, dev+" is down: the kernel decapsulates only through a device that is up", Action{Kind: LinkUp, Link: dev})
	default:
		c.ok(check, "up: it decapsulates what the director sends")
	}
	if c.spec.Tunnel == lvs.GUE {
		c.fou(v6)
	}
}

func (c *checker) fou(v6 bool) {
	port := c.spec.GUEPort
	fam := "IPv4"
	if v6 {
		fam = "IPv6"
	}
	check := fmt.Sprintf("fou port %d (GUE, %s)", port, fam)
	f, ok := c.st.hasFou(port, v6)
	add := Action{Kind: AddFou, Port: port, V6: v6}
	// The fou module first: a kernel that cannot load it on demand (no
	// module alias for the generic netlink family) answers ENOENT to the
	// port's creation.
	module := Action{Kind: LoadModule, Module: "fou"}
	if v6 {
		module.Module = "fou6"
	}
	switch {
	case !ok:
		c.fail(check, "missing: nothing strips the UDP and GUE headers the director adds", module, add)
	case !f.GUE:
		del := Action{Kind: DelFou, Port: port, V6: v6}
		c.items = append(c.items, Item{Check: check, Status: Fail,
			Detail: "the port takes direct foo-over-UDP, not GUE; it is someone else's, so setup leaves it",
			Hint:   del.Command() + " && " + add.Command()})
	default:
		c.ok(check, "receives GUE")
	}
}

// vip checks that v is bound as a single address on lo (or, for TUN, on
// the tunnel device of its family), so the box accepts packets to it.
func (c *checker) vip(v netip.Addr) {
	want := hostPrefix(v)
	check := fmt.Sprintf("VIP %s on lo", want)
	tunDev := ""
	if c.spec.Method == lvs.Tunnel {
		tunDev, _ = c.spec.tunnelDevice(v.Is6())
	}
	var wrong []Addr
	for _, b := range c.st.bound(v) {
		switch {
		case (b.Link == loopback || b.Link == tunDev) && b.Prefix == want:
			c.ok(check, fmt.Sprintf("bound on %s", b.Link))
			return
		case b.Link == loopback:
			wrong = append(wrong, b)
		}
	}
	if len(wrong) > 0 {
		b := wrong[0]
		c.items = append(c.items, Item{Check: check, Status: Fail,
			Detail: fmt.Sprintf("bound as %s: lo then answers for every address of the prefix, not only the VIP; setup does not remove addresses it did not add", b.Prefix),
			Hint:   fmt.Sprintf("ip addr del %s dev lo && %s", b.Prefix, Action{Kind: AddAddr, Link: loopback, Prefix: want}.Command())})
		return
	}
	c.fail(check, "missing: the box drops packets to the VIP", Action{Kind: AddAddr, Link: loopback, Prefix: want})
}

// elsewhere warns about v bound on another interface: that interface
// answers ARP (or neighbour solicitations) for it whatever the sysctls
// say, and takes the VIP's traffic from the director.
func (c *checker) elsewhere(v netip.Addr) {
	tunDev := ""
	if c.spec.Method == lvs.Tunnel {
		tunDev, _ = c.spec.tunnelDevice(v.Is6())
	}
	var on []string
	var hint []string
	for _, b := range c.st.bound(v) {
		if b.Link == loopback || b.Link == tunDev {
			continue
		}
		on = append(on, b.Link)
		hint = append(hint, fmt.Sprintf("ip addr del %s dev %s", b.Prefix, b.Link))
	}
	if len(on) == 0 {
		return
	}
	c.items = append(c.items, Item{Check: fmt.Sprintf("VIP %s only on lo", v), Status: Warn,
		Detail: fmt.Sprintf("also bound on %s, which then answers the network for it and takes the VIP's traffic from the director", strings.Join(on, ", ")),
		Hint:   strings.Join(hint, " && ")})
}
