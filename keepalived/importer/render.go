package importer

import (
	"fmt"
	"strings"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// render writes the service: its comment, [[service]], its check and its
// real servers with their check overrides.
func (im *importer) render(s *svc, name string) string {
	var b strings.Builder
	b.WriteString(comment(s.n.Pos.String()+": "+words(s.n)) + "[[service]]\n")
	var t table
	t.str("name", name)
	if s.ep.fwmark != 0 {
		t.num("fwmark", int64(s.ep.fwmark))
		t.str("family", fmt.Sprintf("ipv%d", s.fwmarkFamily()))
	} else {
		vips := make([]string, len(s.ep.vips))
		for i, v := range s.ep.vips {
			vips[i] = v.String()
		}
		t.set("vips", tomlStrings(vips))
		t.num("port", int64(s.ep.port))
	}
	t.str("protocol", s.proto)
	t.str("scheduler", s.sched)
	if flags := im.schedFlags(s); len(flags) > 0 {
		t.set("scheduler_flags", tomlStrings(flags))
	}
	s.fwd.write(&t)
	if s.announceIf != "" {
		t.str("announce", "arp")
		t.str("announce_interface", s.announceIf)
	}
	t = append(t, s.top...)
	t.write(&b, "")
	base := im.serviceCheck(s)
	b.WriteString("\n[service.health_check]\n")
	base.write(&b, "")
	for _, r := range s.reals {
		b.WriteString("\n[[service.real_server]]\n")
		r.keys(s).write(&b, "")
		if o := im.override(s, r, base); len(o) > 0 {
			b.WriteString("[service.real_server.health_check]\n")
			o.write(&b, "")
		}
	}
	return b.String()
}

// schedFlags maps keepalived's scheduler flags for lbd's scheduler.
func (im *importer) schedFlags(s *svc) []string {
	var out []string
	for i := range s.n.Children {
		c := &s.n.Children[i]
		flag := c.Keyword
		switch {
		case flag == "hashed":
			im.rep.add(c, Unneeded, "the kernel marks every virtual server hashed itself")
			continue
		case flag == "ops" || flag == "flag-3":
			im.rep.notMapped(c, "lbd has no one-packet scheduling (%s)", flag)
			continue
		case flag == "flag-1" && (s.sched == "sh" || s.sched == "mh"):
			flag = s.sched + "-fallback"
		case flag == "flag-2" && (s.sched == "sh" || s.sched == "mh"):
			flag = s.sched + "-port"
		case flag == "flag-1" || flag == "flag-2":
			im.rep.add(c, Unneeded, "no effect with scheduler %s", s.sched)
			continue
		}
		if !strings.HasPrefix(flag, "sh-") && !strings.HasPrefix(flag, "mh-") {
			continue // not a flag
		}
		if !strings.HasPrefix(flag, s.sched+"-") {
			im.rep.add(c, Unneeded, "no effect with scheduler %s", s.sched)
			continue
		}
		if !contains(out, flag) {
			out = append(out, flag)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// serviceCheck is the service's check: its first checked real server's
// (the others override what differs); type none when keepalived checks
// none of them (lbd's default would check them).
func (im *importer) serviceCheck(s *svc) table {
	for _, r := range s.reals {
		if r.check != nil {
			return r.check
		}
	}
	return table{{"type", tomlString("none")}}
}

// typeKeys are the keys a check's type adds; a real server of another
// type cannot unset them.
var commonCheckKeys = []string{"type", "interval", "timeout", "rise", "fall", "initial_state", "port", "source_address"}

// override is what the real server's check changes in the service's.
func (im *importer) override(s *svc, r *real, base table) table {
	own := r.check
	if own == nil {
		own = table{{"type", tomlString("none")}}
	}
	if own.get("type") != base.get("type") && hasTypeKeys(base) {
		im.rep.notMapped(r.checkNodeOr(), "lbd overrides a service's check per real server key by key: this real server's %s check cannot replace the service's %s check, which it gets instead", own.get("type"), base.get("type"))
		return nil
	}
	var out table
	for _, l := range own {
		if base.get(l.key) != l.value || !base.has(l.key) {
			out = append(out, l)
		}
	}
	for _, l := range base {
		if l.key == "port" && !own.has("port") && own.get("type") != "none" {
			out.num("port", int64(r.checkPort(s)))
			continue
		}
		if !own.has(l.key) && own.get("type") == base.get("type") {
			im.rep.notMapped(r.checkNodeOr(), "the service's check sets %s, which this real server's check does not and cannot unset: it gets the service's", l.key)
		}
	}
	return out
}

// checkPort is the port keepalived checks a real server at when its
// checker names none: its own.
func (r *real) checkPort(s *svc) int {
	if r.port != 0 {
		return r.port
	}
	return s.ep.port
}

func hasTypeKeys(t table) bool {
	for _, l := range t {
		if !contains(commonCheckKeys, l.key) {
			return true
		}
	}
	return false
}

func (r *real) checkNodeOr() *conf.Node {
	if r.checkNode != nil {
		return r.checkNode
	}
	return r.n
}
