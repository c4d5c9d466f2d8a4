package importer

import (
	"strconv"
	"strings"
	"time"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// maxAuthPass is VRRPv2's password length: keepalived uses the first 8
// bytes, lbd refuses more.
const maxAuthPass = 8

func (im *importer) vrrpAuth(t *table, c *conf.Node, v *inst) {
	typ, pass := c.Child("auth_type"), c.Child("auth_pass")
	if typ == nil {
		im.rep.notMapped(c, "no auth_type")
		return
	}
	if a, _ := typ.Arg(0); !strings.EqualFold(a, "PASS") {
		im.rep.notMapped(typ, "lbd has no IPsec AH authentication (keepalived deprecated it)")
		return
	}
	p := ""
	if pass != nil {
		p, _ = pass.Arg(0)
	}
	if p == "" {
		im.rep.notMapped(c, "no auth_pass")
		return
	}
	if len(p) > maxAuthPass {
		im.rep.differs(pass, "keepalived uses the first %d bytes of the password; lbd refuses more: written as those", maxAuthPass)
		p = p[:maxAuthPass]
	}
	t.str("auth_type", "pass")
	t.str("auth_pass", p)
	for i := range c.Children {
		if k := &c.Children[i]; k.Keyword != "auth_type" && k.Keyword != "auth_pass" {
			im.rep.unknown(k, "authentication")
		}
	}
}

func (im *importer) trackInterfaces(t *table, c *conf.Node) {
	var out []string
	for i := range c.Children {
		k := &c.Children[i]
		out = append(out, k.Keyword)
		if len(k.Args) > 0 {
			im.rep.notMapped(k, "lbd puts the instance in FAULT while the interface is down; it does not lower the priority by a weight")
		}
	}
	if len(out) > 0 {
		t.set("track_interfaces", tomlStrings(out))
	}
}

// notify maps a notify program: lbd runs an absolute path with no
// arguments and no shell, which must be executable here.
func (im *importer) notify(t *table, c *conf.Node) {
	args, err := conf.SplitQuoted(strings.Join(c.Args, " "))
	switch {
	case err != nil || len(args) == 0:
		im.rep.notMapped(c, "not a command")
	case len(args) > 1:
		im.rep.notMapped(c, "lbd runs a notify program without arguments or a shell: wrap it in a script")
	case !strings.HasPrefix(args[0], "/") || !im.opts.Executable(args[0]):
		im.rep.notMapped(c, "%s is not an executable file on this box, and lbd checks that it is: install it and write %s = %s", args[0], c.Keyword, tomlString(args[0]))
	default:
		t.str(c.Keyword, args[0])
		im.rep.differs(c, "lbd runs it as nobody, without a shell, for at most 30 s")
	}
}

// finishInstance writes the [[vrrp]] table in the reference's order.
func (im *importer) finishInstance(v *inst, t table, preempt bool, advert *conf.Node) {
	if v.ipv6 && v.version == 2 {
		v.version = 3 // keepalived runs an IPv6 instance as VRRPv3
	}
	var out table
	out.str("name", v.name)
	out = append(out, pick(t, "interface", "virtual_router_id")...)
	out.num("version", int64(v.version))
	out = append(out, pick(t, "priority")...)
	im.advert(&out, advert, v.version)
	out.set("preempt", strconv.FormatBool(preempt))
	if preempt {
		out = append(out, pick(t, "preempt_delay")...)
	} else if t.has("preempt_delay") {
		im.rep.add(v.n, Unneeded, "preempt_delay has no effect with nopreempt")
	}
	out = append(out, pick(t, "unicast_peers", "unicast_source")...)
	if v.version == 2 {
		out = append(out, pick(t, "auth_type", "auth_pass")...)
	} else if t.has("auth_type") {
		im.rep.notMapped(v.n, "VRRPv3 has no authentication (RFC 5798): not written")
	}
	if len(v.addresses) > 0 {
		out.set("addresses", tomlStrings(v.addresses))
	}
	if len(v.excluded) > 0 {
		out.set("excluded_addresses", tomlStrings(v.excluded))
	}
	if len(v.services) > 0 {
		out.set("services", tomlStrings(v.services))
	}
	out = append(out, pick(t, "track_interfaces", "garp_master_repeat", "garp_master_delay",
		"notify", "notify_master", "notify_backup", "notify_fault", "notify_stop")...)
	var b strings.Builder
	b.WriteString(comment(v.n.Pos.String()+": "+words(v.n)) + "[[vrrp]]\n")
	out.write(&b, "")
	im.globals = append(im.globals, unit{b.String(), v.n})
}

// advert writes advert_interval: keepalived's default 1 s, always written
// (lbd's version 3 default is 200ms).
func (im *importer) advert(t *table, c *conf.Node, version int) {
	d := time.Second
	if c != nil {
		a, _ := c.Arg(0)
		v, ok := seconds(a)
		if !ok {
			im.rep.notMapped(c, "%q is not a number of seconds; keepalived's 1s is written", a)
		} else {
			d = v
		}
	}
	if version == 2 && (d < time.Second || d%time.Second != 0) {
		r := max(d.Round(time.Second), time.Second)
		im.rep.differs(c, "VRRPv2 carries whole seconds: written as %s", r)
		d = r
	}
	if version == 3 && d%(10*time.Millisecond) != 0 {
		d = max(d.Round(10*time.Millisecond), 10*time.Millisecond)
		im.rep.differs(c, "VRRPv3 carries centiseconds: written as %s", d)
	}
	t.set("advert_interval", tomlDuration(d))
}

// pick is the lines of t with the keys given, in that order.
func pick(t table, keys ...string) table {
	var out table
	for _, k := range keys {
		for _, l := range t {
			if l.key == k {
				out = append(out, l)
			}
		}
	}
	return out
}

// syncGroup maps vrrp_sync_group NAME { group { A B } notify… }.
func (im *importer) syncGroup(n *conf.Node, names map[string]string) {
	kname, _ := n.Arg(0)
	var t table
	t.str("name", im.vrrpName("group-"+kname))
	var members []string
	for i := range n.Children {
		c := &n.Children[i]
		switch c.Keyword {
		case "group":
			for j := range c.Children {
				m := c.Children[j].Keyword
				if lbd, ok := names[m]; ok {
					members = append(members, lbd)
				} else {
					im.rep.notMapped(&c.Children[j], "no vrrp_instance %q", m)
				}
			}
		case "notify", "notify_master", "notify_backup", "notify_fault", "notify_stop":
			im.notify(&t, c)
		case "smtp_alert":
			im.rep.notMapped(c, "lbd sends no mail: alert on its metrics")
		default:
			im.rep.unknown(c, "a vrrp_sync_group")
		}
	}
	if len(members) < 2 {
		im.rep.notMapped(n, "a sync group needs at least two instances, and this one has %d: not written", len(members))
		return
	}
	var b strings.Builder
	b.WriteString(comment(n.Pos.String()+": "+words(n)) + "[[vrrp_sync_group]]\n")
	out := append(pick(t, "name"), kv{"instances", tomlStrings(members)})
	out = append(out, pick(t, "notify", "notify_master", "notify_backup", "notify_fault", "notify_stop")...)
	out.write(&b, "")
	im.globals = append(im.globals, unit{b.String(), n})
}

// vrrpName makes a valid, unused instance or group name (1–64 letters,
// digits, '.', '_', '-').
func (im *importer) vrrpName(kname string) string {
	var b strings.Builder
	for _, r := range kname {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	base := b.String()
	if base == "" {
		base = "instance"
	}
	if len(base) > 56 {
		base = base[:56]
	}
	name := base
	for i := 2; im.vrrpNames[name]; i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	im.vrrpNames[name] = true
	return name
}
