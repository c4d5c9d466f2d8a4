package realserver

import (
	"fmt"
	"strconv"
)

// knob is one per-interface IPv4 sysctl and what DR or TUN needs of it.
// For all three the kernel uses the larger of conf/all and the
// interface's own value (IN_DEV_MAXCONF in include/linux/inetdevice.h;
// ip-sysctl.rst: "The max value from conf/{all,interface}/... is used").
type knob struct {
	name string
	want int            // what setup writes
	ok   func(int) bool // whether an effective value does the job
	why  string         // what goes wrong otherwise
	need string         // the values that do, in words
}

// arpIgnore: 1 and 2 answer only for addresses of the interface asked, 8
// answers nothing; 3 answers for any global address (in_dev is dropped
// from the lookup), 4-7 and above 8 answer everything.
func arpIgnore() knob {
	return knob{"arp_ignore", 1, func(v int) bool { return v == 1 || v == 2 || v == 8 },
		"the box answers ARP for the VIP on lo and takes the director's traffic", "1 or 2"}
}

// arpAnnounce: only 2 keeps the VIP out of the box's ARP requests; the
// kernel treats values above 2 as 0.
func arpAnnounce() knob {
	return knob{"arp_announce", 2, func(v int) bool { return v == 2 },
		"the box's ARP requests may carry the VIP as their source and teach the network that the VIP is here", "2"}
}

// rpFilter: the decapsulated packet comes in on the tunnel device with the
// client's address, whose route leads elsewhere; a device without an
// address fails loose mode too (__fib_validate_source's last resort).
func rpFilter() knob {
	return knob{"rp_filter", 0, func(v int) bool { return v == 0 },
		"the kernel drops the decapsulated packet (its source, the client, is not routed through the tunnel device)", "0"}
}

// arp checks the ARP knobs on all and on every interface that answers ARP.
func (c *checker) arp() {
	var devs []string
	for _, l := range c.st.Links {
		if !l.Loopback && !l.NoARP {
			devs = append(devs, l.Name)
		}
	}
	for _, k := range []knob{arpIgnore(), arpAnnounce()} {
		c.knob(k, devs)
	}
}

// rpFilter checks rp_filter on all and on the IPv4 tunnel device.
func (c *checker) rpFilter() {
	dev, _ := c.spec.tunnelDevice(false)
	var devs []string
	if _, ok := c.st.link(dev); ok {
		devs = append(devs, dev)
	}
	c.knob(rpFilter(), devs)
}

// knob checks k on all, then its effective value on each device. Setup
// sets all (which covers interfaces added later) and a device's own value
// only where that alone spoils the maximum.
func (c *checker) knob(k knob, devs []string) {
	allKey := confKey("all", k.name)
	all, ok := c.st.sysctl(allKey)
	switch {
	case !ok:
		c.fail(sysctlName(allKey), "cannot be read")
		return
	case k.ok(all):
		c.ok(sysctlName(allKey), "is "+strconv.Itoa(all))
	default:
		c.fail(sysctlName(allKey), fmt.Sprintf("%d, needs %s: %s", all, k.need, k.why), k.set(allKey, all))
	}
	for _, d := range devs {
		key := confKey(d, k.name)
		v, ok := c.st.sysctl(key)
		if !ok {
			continue // no IPv4 on it
		}
		check := fmt.Sprintf("%s on %s", k.name, d)
		eff := max(all, v)
		detail := fmt.Sprintf("max(all=%d, %s=%d) = %d", all, d, v, eff)
		switch {
		case k.ok(eff):
			c.ok(check, detail)
		case !k.ok(max(k.want, v)):
			c.fail(check, fmt.Sprintf("%s, needs %s: %s", detail, k.need, k.why), k.set(key, v))
		default:
			c.fail(check, fmt.Sprintf("%s, needs %s: setting %s fixes it", detail, k.need, sysctlName(allKey)))
		}
	}
}

func (k knob) set(key string, was int) Action {
	return Action{Kind: SetSysctl, Key: key, Value: strconv.Itoa(k.want), Was: strconv.Itoa(was)}
}
