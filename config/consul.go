package config

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/config/internal/tree"
)

// consulMeta maps the service meta keys of a Consul-defined virtual
// service to the [[service]] keys they stand for, so that a registration
// is decoded and validated by the same code as a file.
var consulMeta = []struct{ meta, key, kind string }{
	{"lbd-vip", "vips", "list"},
	{"lbd-port", "port", "int"},
	{"lbd-protocol", "protocol", "string"},
	{"lbd-scheduler", "scheduler", "string"},
	{"lbd-scheduler-flags", "scheduler_flags", "list"},
	{"lbd-session-affinity", "session_affinity", "bool"},
	{"lbd-session-affinity-timeout", "session_affinity_timeout", "string"},
	{"lbd-source-ranges", "source_ranges", "list"},
	{"lbd-snat", "snat", "string"},
	{"lbd-announce", "announce", "string"},
	{"lbd-announce-interface", "announce_interface", "string"},
	{"lbd-on-unhealthy", "on_unhealthy", "string"},
	{"lbd-drain-timeout", "drain_timeout", "string"},
	{"lbd-quorum", "quorum", "int"},
}

// ConsulWeightMeta is the instance meta key holding a real server's weight
// in a Consul-defined virtual service; it is not part of the definition.
const ConsulWeightMeta = defaultWeightMeta

// ConsulMetaKeys lists the service meta keys a Consul-defined virtual
// service may carry.
func ConsulMetaKeys() []string {
	keys := []string{ConsulWeightMeta}
	for _, m := range consulMeta {
		keys = append(keys, m.meta)
	}
	slices.Sort(keys)
	return keys
}

// ServiceFromConsul decodes the virtual service that the Consul service
// name defines in its lbd-* service meta, as strictly as a [[service]]
// table, and checks that its VIPs lie inside cfg's VIP pools. Errors are
// an ErrorList located at "consul service NAME" with the meta key at fault.
// Its real servers are the Consul service's own instances (s.Consul).
func ServiceFromConsul(cfg *Config, name string, meta map[string]string) (Service, error) {
	var errs ErrorList
	where := fmt.Sprintf("consul service %q", name)
	src := &source{name: where, errs: &errs}
	m := map[string]any{"name": name, "consul": map[string]any{"service": name}}
	known := ConsulMetaKeys()
	for k := range meta {
		if !strings.HasPrefix(k, "lbd-") {
			continue // the application's own meta
		}
		if !slices.Contains(known, k) {
			msg := "unknown lbd meta key"
			if s := suggest(k, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			errs = append(errs, &Error{Pos: Pos{File: where}, Key: "meta " + k, Msg: msg + "; accepted: " + strings.Join(known, ", ")})
		}
	}
	for _, mk := range consulMeta {
		v, ok := meta[mk.meta]
		if !ok {
			continue
		}
		m[mk.key] = metaValue(v, mk.kind)
	}
	if _, ok := meta["lbd-vip"]; !ok { // checked here to name the meta key
		errs = append(errs, &Error{Pos: Pos{File: where}, Key: "meta lbd-vip", Msg: "missing; expected the VIP(s) of the virtual service, such as lbd-vip = \"198.51.100.10\" (comma-separated for several)"})
	}
	if _, ok := meta["lbd-port"]; !ok {
		errs = append(errs, &Error{Pos: Pos{File: where}, Key: "meta lbd-port", Msg: "missing; expected the virtual service's port, such as lbd-port = \"80\""})
	}
	n := len(errs)
	s := Service{}
	_, hasVIP := meta["lbd-vip"]
	_, hasPort := meta["lbd-port"]
	if hasVIP && hasPort { // else the decoder would repeat what is missing
		s = decodeService(newNode(src, "", tree.FromMap(m)))
		for _, e := range errs[n:] {
			e.Key = metaKeyOf(e.Key)
		}
	}
	for i, vip := range s.VIPs {
		if !slices.ContainsFunc(cfg.Consul.VirtualServices.VIPPools, func(p netip.Prefix) bool { return p.Contains(vip) }) {
			errs = append(errs, &Error{Pos: Pos{File: where}, Key: "meta lbd-vip", Msg: fmt.Sprintf("%s (VIP %d) is outside the VIP pools Consul may claim from (%s); expected an address in [consul.virtual_services] vip_pools of %s", vip, i+1, prefixList(cfg.Consul.VirtualServices.VIPPools), mainFile(cfg))})
		}
	}
	if len(errs) > 0 {
		errs.sort()
		return Service{}, errs
	}
	s.Pos = Pos{File: where}
	return s, nil
}

// metaValue converts a meta string to the TOML type its key expects; what
// does not convert is passed on as a string for the decoder to refuse with
// its usual message.
func metaValue(v, kind string) any {
	switch kind {
	case "list":
		var out []any
		for _, e := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(e))
		}
		return out
	case "int":
		if i, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			return i
		}
	case "bool":
		if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
			return b
		}
	}
	return v
}

// metaKeyOf names the meta key behind a decoder key path such as vips[1].
func metaKeyOf(key string) string {
	base, _, _ := strings.Cut(key, "[")
	for _, mk := range consulMeta {
		if mk.key == base {
			return "meta " + mk.meta
		}
	}
	if key == "" {
		return ""
	}
	return "meta " + key
}

func prefixList(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "none"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

func mainFile(cfg *Config) string {
	if len(cfg.Files) == 0 {
		return "the main file"
	}
	return cfg.Files[0]
}
