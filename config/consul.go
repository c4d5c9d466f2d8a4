package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/lbdproject/lbd/config/internal/tree"
)

// decodeConsul decodes the [consul] table.
func decodeConsul(t *node, c *Consul) {
	c.Enabled = true
	if t.str("address", &c.Address) {
		t.hostPort("address", c.Address)
	}
	var scheme string
	if t.oneOf("scheme", &scheme, "http", "https") {
		c.Scheme = scheme
	}
	t.str("datacenter", &c.Datacenter)
	if t.str("token_file", &c.TokenFile) && !filepath.IsAbs(c.TokenFile) {
		t.errorf("token_file", "%q is not an absolute path; expected one such as \"/etc/lbd/consul.token\"", c.TokenFile)
	}
	t.keepPos("token_file")
	if tls := t.table("tls"); tls != nil {
		for _, k := range []string{"ca_file", "cert_file", "key_file"} {
			tls.keepPos(k)
		}
		for _, f := range []struct {
			key string
			dst *string
		}{{"ca_file", &c.TLS.CAFile}, {"cert_file", &c.TLS.CertFile}, {"key_file", &c.TLS.KeyFile}} {
			if tls.str(f.key, f.dst) && !filepath.IsAbs(*f.dst) {
				tls.errorf(f.key, "%q is not an absolute path; expected one such as \"/etc/lbd/consul-ca.pem\"", *f.dst)
			}
		}
		tls.str("server_name", &c.TLS.ServerName)
		tls.boolean("insecure_skip_verify", &c.TLS.InsecureSkipVerify)
		if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
			key := "cert_file"
			if c.TLS.CertFile == "" {
				key = "key_file"
			}
			tls.errorf(key, "a client certificate needs both cert_file and key_file; expected both or neither")
		}
		tls.finish()
	}
	if vs := t.table("virtual_services"); vs != nil {
		v := &c.VirtualServices
		if vs.str("tag", &v.Tag) && v.Tag == "" {
			vs.errorf("tag", "is empty; expected the Consul tag that marks services defining a virtual service, such as \"lbd\"")
		}
		v.VIPPools = vs.prefixes("vip_pools")
		v.RealServerNetworks = vs.prefixes("real_server_networks")
		// Each missing key is reported: one never hides another.
		if !vs.has("tag") {
			vs.errorf("", "names no tag; expected tag = \"lbd\" (or similar): Consul services with it define virtual services")
		}
		required := []struct{ key, example, what string }{
			{"vip_pools", "198.51.100.0/24", "the only networks Consul-defined VIPs may come from"},
			{"real_server_networks", "10.0.0.0/8", "the only networks real servers of Consul-defined virtual services may live in"},
		}
		for _, r := range required {
			switch {
			case !vs.has(r.key) && (r.key == "vip_pools" || vs.has("tag")):
				vs.errorf("", "has no %s; expected %s = [\"%s\"] (or similar): %s", r.key, r.key, r.example, r.what)
			case vs.has(r.key) && isEmptyArray(vs, r.key):
				vs.errorf(r.key, "is empty; expected at least one CIDR such as \"%s\": %s", r.example, r.what)
			}
		}
		vs.finish()
	}
	t.finish()
}

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
	sink := &errorSink{}
	where := fmt.Sprintf("consul service %q", echo(name))
	src := &source{name: where, errs: sink}
	m := map[string]any{"name": name, "consul": map[string]any{"service": name}}
	known := ConsulMetaKeys()
	for k := range meta {
		if !strings.HasPrefix(k, "lbd-") {
			continue // the application's own meta
		}
		if k == "lbd-forward" {
			sink.add(newError(Pos{File: where}, "meta "+k, "Consul-defined virtual services forward by NAT only (their real servers are the registrations, at their own ports, which DR and tunnels cannot map); expected no lbd-forward: define a DR or tunnel service in a file, with [service.consul] for its real servers"))
			continue
		}
		if !slices.Contains(known, k) {
			msg := "unknown lbd meta key"
			if s := suggest(k, known); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			sink.add(newError(Pos{File: where}, "meta "+k, "%s; accepted: %s", whole(msg), whole(strings.Join(known, ", "))))
		}
	}
	for _, mk := range consulMeta {
		v, ok := meta[mk.meta]
		if !ok {
			continue
		}
		m[mk.key] = metaValue(v, mk.kind)
	}
	_, hasVIP := meta["lbd-vip"]
	_, hasPort := meta["lbd-port"]
	if !hasVIP { // checked here to name the meta key
		sink.add(&Error{Pos: Pos{File: where}, Key: "meta lbd-vip", Msg: "missing; expected the VIP(s) of the virtual service, such as lbd-vip = \"198.51.100.10\" (comma-separated for several)"})
	}
	if !hasPort {
		sink.add(&Error{Pos: Pos{File: where}, Key: "meta lbd-port", Msg: "missing; expected the virtual service's port, such as lbd-port = \"80\""})
	}
	n := len(sink.list)
	s := Service{}
	if hasVIP && hasPort { // else the decoder would repeat what is missing
		s = decodeService(newNode(src, "", tree.FromMap(m)))
		for _, e := range sink.list[n:] {
			e.Key = metaKeyOf(e.Key)
		}
	}
	pools := cfg.Consul.VirtualServices.VIPPools
	for i, vip := range s.VIPs {
		if !slices.ContainsFunc(pools, func(p netip.Prefix) bool { return p.Contains(vip) }) {
			sink.add(newError(Pos{File: where}, "meta lbd-vip", "%s (VIP %d) is outside the VIP pools Consul may claim from (%s); expected an address in [consul.virtual_services] vip_pools of %s", vip, i+1, whole(prefixList(pools)), whole(mainFile(cfg))))
		}
	}
	if errs := sink.result(where); errs != nil {
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
