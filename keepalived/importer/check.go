package importer

import (
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// keepalived's defaults (check_data.c, check_api.c, check_dns.c).
const (
	defaultDelayLoop      = 60 * time.Second
	defaultConnectTimeout = 5 * time.Second
	maxCheckDuration      = time.Hour
	maxFall               = 100
)

// defaultRetry is each checker's retry count when none is written.
var defaultRetry = map[string]int{"MISC_CHECK": 0, "DNS_CHECK": 3}

// chk is one real server's check being built.
type chk struct {
	typ  string
	t    timing
	keys table // type-specific keys, after the timings
	port int
	// miscTimeout is MISC_CHECK's own timeout (its default: delay_loop).
	miscTimeout *time.Duration
}

// checkTable maps the real server's checker to lbd's check keys.
func (im *importer) checkTable(s *svc, r *real) table {
	n := r.checkNode
	c := &chk{t: s.timing.over(r.timing)}
	var own timing
	for i := range n.Children {
		k := &n.Children[i]
		if own.read(&im.rep, k) || im.commonKey(c, r, k) {
			continue
		}
		if !im.typeKey(c, n.Keyword, k) {
			im.rep.unknown(k, n.Keyword)
		}
	}
	c.t = c.t.over(own)
	if !im.finishType(c, s, r, n) {
		return table{{"type", tomlString("none")}}
	}
	return im.timings(c, s, r, n)
}

// commonKey maps what every checker takes (check_api.c).
func (im *importer) commonKey(c *chk, r *real, k *conf.Node) bool {
	arg, _ := k.Arg(0)
	switch k.Keyword {
	case "connect_port":
		p, err := strconv.ParseUint(arg, 10, 16)
		if err != nil || p == 0 {
			im.rep.notMapped(k, "port %q is not 1–65535", arg)
		} else {
			c.port = int(p)
		}
	case "connect_ip":
		if a, err := netip.ParseAddr(arg); err != nil || a.Unmap() != r.addr {
			im.rep.notMapped(k, "lbd checks a real server at its own address (a check's port may differ, its address may not)")
		}
	case "bindto":
		if a, err := netip.ParseAddr(arg); err == nil && a.Zone() == "" {
			c.keys.str("source_address", a.Unmap().String())
		} else {
			im.rep.notMapped(k, "%q is not an IP address", arg)
		}
	case "bind_port", "bind_if", "fwmark":
		im.rep.notMapped(k, "lbd's checks choose their source port and interface, and set no mark")
	default:
		return false
	}
	return true
}

// typeKey maps a keyword of one checker type.
func (im *importer) typeKey(c *chk, kind string, k *conf.Node) bool {
	arg, _ := k.Arg(0)
	switch {
	case (kind == "HTTP_GET" || kind == "SSL_GET") && k.Keyword == "url":
		if c.keys.has("path") {
			im.rep.notMapped(k, "lbd checks one path per real server: the first url block is mapped")
			return true
		}
		im.url(c, k)
	case (kind == "HTTP_GET" || kind == "SSL_GET") && k.Keyword == "http_protocol":
		im.rep.differs(k, "lbd sends HTTP/1.1 requests")
	case kind == "SSL_GET" && k.Keyword == "enable_sni":
		c.keys.set("sni", "true")
	case kind == "MISC_CHECK" && k.Keyword == "misc_path":
		c.keys.set("misc_path", strings.Join(k.Args, " "))
	case kind == "MISC_CHECK" && k.Keyword == "misc_timeout":
		d, ok := seconds(arg)
		if !ok {
			im.rep.notMapped(k, "%q is not a number of seconds", arg)
			return true
		}
		c.miscTimeout = &d
	case kind == "MISC_CHECK" && k.Keyword == "misc_dynamic":
		im.rep.notMapped(k, "lbd does not take weights from a check's exit status: exit 0 is healthy, any other unhealthy")
	case kind == "MISC_CHECK" && k.Keyword == "user":
		if arg != "root" {
			c.keys.str("user", arg)
		} else {
			im.rep.differs(k, "lbd runs checks unprivileged: as nobody")
		}
	case kind == "DNS_CHECK" && (k.Keyword == "type" || k.Keyword == "name"):
		c.keys.set("dns_"+k.Keyword, arg)
	case kind == "UDP_CHECK" && (k.Keyword == "payload" || k.Keyword == "require_reply"):
		c.keys.set("udp_"+k.Keyword, strings.Join(k.Args, ""))
	case kind == "UDP_CHECK" && (k.Keyword == "min_reply_length" || k.Keyword == "max_reply_length"):
		im.rep.notMapped(k, "lbd checks what a reply contains, not its length")
	default:
		return false
	}
	return true
}

func (t table) has(key string) bool {
	for _, l := range t {
		if l.key == key {
			return true
		}
	}
	return false
}

func (t table) get(key string) string {
	for _, l := range t {
		if l.key == key {
			return l.value
		}
	}
	return ""
}

// url maps an HTTP_GET url block: path, status_code, virtualhost; digest
// and regex lbd does not check.
func (im *importer) url(c *chk, u *conf.Node) {
	status := []string{tomlString("200-299")} // keepalived's default
	for i := range u.Children {
		k := &u.Children[i]
		switch k.Keyword {
		case "path":
			p, _ := k.Arg(0)
			if !strings.HasPrefix(p, "/") {
				p = "/" + p
			}
			c.keys.str("path", p)
		case "status_code":
			status = status[:0]
			for _, a := range k.Args {
				if strings.Contains(a, "-") {
					status = append(status, tomlString(a))
				} else if _, err := strconv.Atoi(a); err == nil {
					status = append(status, a)
				}
			}
		case "virtualhost":
			v, _ := k.Arg(0)
			c.t.virtualhost = &v
		case "digest":
			im.rep.differs(k, "lbd does not check the body's MD5 digest: only the status is checked (a page that changed still passes)")
		default:
			im.rep.notMapped(k, "lbd checks the path and status (and a body substring), not %s", k.Keyword)
		}
	}
	if !c.keys.has("path") {
		c.keys.str("path", "/")
	}
	if len(status) > 0 {
		c.keys.set("expect_status", "["+strings.Join(status, ", ")+"]")
	}
}

// finishType writes the check's type and what its type needs; false
// when the check cannot be written (then the real server is not checked).
func (im *importer) finishType(c *chk, s *svc, r *real, n *conf.Node) bool {
	raw := c.keys
	c.keys = nil
	keep := func(keys ...string) {
		for _, l := range raw {
			for _, k := range keys {
				if l.key == k {
					c.keys = append(c.keys, l)
				}
			}
		}
	}
	switch n.Keyword {
	case "TCP_CHECK":
		c.typ = "tcp"
		if s.proto == "sctp" {
			im.rep.differs(n, "keepalived connects by TCP to an SCTP service's real server; lbd's check is written as tcp too")
		}
		keep("source_address")
	case "HTTP_GET", "SSL_GET":
		return im.finishHTTP(c, raw, keep, n)
	case "MISC_CHECK":
		return im.finishMisc(c, raw, keep, n)
	case "DNS_CHECK":
		c.typ = "dns"
		keep("source_address")
		name, typ := raw.get("dns_name"), raw.get("dns_type")
		if name == "" {
			name = "."
		}
		if typ == "" {
			typ = "SOA"
		}
		c.keys.str("query_name", name)
		c.keys.str("query_type", strings.ToUpper(typ))
	case "UDP_CHECK":
		return im.finishUDP(c, raw, keep, n)
	}
	return true
}

func (im *importer) finishHTTP(c *chk, raw table, keep func(...string), n *conf.Node) bool {
	c.typ = "http"
	if n.Keyword == "SSL_GET" {
		c.typ = "https"
	}
	keep("source_address", "path")
	if c.t.virtualhost != nil {
		c.keys.str("host", *c.t.virtualhost)
	}
	keep("expect_status")
	if !raw.has("path") {
		im.rep.notMapped(n, "no url block: keepalived checks nothing here; lbd checks / for 200-299")
		c.keys.str("path", "/")
		c.keys.set("expect_status", "["+tomlString("200-299")+"]")
	}
	if c.typ == "https" {
		c.keys.set("tls_verify", "false") // keepalived does not verify the certificate
		if raw.has("sni") && c.t.virtualhost != nil {
			c.keys.str("tls_server_name", *c.t.virtualhost)
		} else if raw.has("sni") {
			im.rep.notMapped(n, "enable_sni without a virtualhost: lbd sends no server name")
		}
	}
	return true
}

func (im *importer) finishMisc(c *chk, raw table, keep func(...string), n *conf.Node) bool {
	line := raw.get("misc_path")
	args, err := conf.SplitQuoted(line)
	switch {
	case err != nil || len(args) == 0:
		im.rep.notMapped(n, "misc_path %q cannot be split into a command: the real server is not checked", line)
		return false
	case !strings.HasPrefix(args[0], "/"):
		im.rep.notMapped(n, "lbd runs an absolute program without a shell; %q is not one: the real server is not checked (write the check by hand)", args[0])
		return false
	case !im.opts.Executable(args[0]):
		im.rep.notMapped(n, "%s is not an executable file on this box, and lbd checks that it is: the check is not written and the real server is not checked; install it and write type = \"exec\", command = %s", args[0], tomlStrings(args))
		return false
	}
	c.typ = "exec"
	c.keys.set("command", tomlStrings(args))
	keep("user")
	if !raw.has("user") {
		im.rep.differs(n, "lbd runs the program as nobody, without a shell (keepalived: as script_user, root by default)")
	}
	return true
}

func (im *importer) finishUDP(c *chk, raw table, keep func(...string), n *conf.Node) bool {
	payload, err := hex.DecodeString(raw.get("udp_payload"))
	if err != nil || len(payload) == 0 || !utf8.Valid(payload) {
		im.rep.notMapped(n, "lbd's udp check needs a payload it can write as text; this one is missing, not hexadecimal or not UTF-8: the real server is not checked")
		return false
	}
	c.typ = "udp"
	keep("source_address")
	c.keys.str("payload", string(payload))
	if raw.has("udp_require_reply") {
		want, err := hex.DecodeString(raw.get("udp_require_reply"))
		if err != nil || !utf8.Valid(want) {
			im.rep.notMapped(n, "require_reply is not hexadecimal UTF-8 text: lbd expects any reply")
		} else if len(want) > 0 {
			c.keys.str("expect", string(want))
		}
	} else {
		im.rep.differs(n, "without require_reply keepalived counts the absence of an ICMP error as success; lbd needs a reply")
	}
	return true
}
