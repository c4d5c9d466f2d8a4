package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbdproject/lbd/lvs"
)

var (
	checkTypes = []string{string(CheckNone), string(CheckTCP), string(CheckHTTP), string(CheckHTTPS),
		string(CheckUDP), string(CheckDNS), string(CheckExec), string(CheckSCTP)}
	dnsTypes  = []string{"A", "AAAA", "CNAME", "MX", "NS", "PTR", "SOA", "SRV", "TXT"}
	dnsRcodes = []string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED"}

	// checkKeys lists the keys that apply only to some check types.
	checkKeys = map[string][]CheckType{
		"path":            {CheckHTTP, CheckHTTPS},
		"host":            {CheckHTTP, CheckHTTPS},
		"expect_status":   {CheckHTTP, CheckHTTPS},
		"expect_body":     {CheckHTTP, CheckHTTPS},
		"tls_server_name": {CheckHTTPS},
		"tls_verify":      {CheckHTTPS},
		"payload":         {CheckUDP},
		"expect":          {CheckUDP},
		"query_name":      {CheckDNS},
		"query_type":      {CheckDNS},
		"expect_rcode":    {CheckDNS},
		"expect_answer":   {CheckDNS},
		"command":         {CheckExec},
		"user":            {CheckExec},
	}
)

// defaultCheck is the check of a service without [service.health_check]:
// a connect in the service's protocol for TCP and SCTP services (an SCTP
// association is set up and aborted as a TCP connection is); UDP has no
// protocol-neutral check, so UDP real servers are taken as healthy unless
// a check is configured.
func defaultCheck(p lvs.Protocol) HealthCheck {
	c := HealthCheck{
		Type:           CheckTCP,
		Interval:       defaultInterval,
		Timeout:        defaultTimeout,
		Rise:           2,
		Fall:           3,
		InitialHealthy: true,
		Path:           "/",
		ExpectStatus:   []StatusRange{{200, 399}},
		TLSVerify:      true,
		QueryType:      "A",
		ExpectRcode:    "NOERROR",
		User:           defaultCheckUser,
	}
	switch p {
	case lvs.UDP:
		c.Type = CheckNone
	case lvs.SCTP:
		c.Type = CheckSCTP
	}
	return c
}

// Default timings of a check; an unwritten one follows the other (see
// timings).
const (
	defaultInterval = 2 * time.Second
	defaultTimeout  = time.Second
)

// written says which timings of a check the admin wrote: in its own table,
// or in the service's check that a real server's table overrides.
type written struct{ interval, timeout bool }

// decodeCheck decodes a [health_check] table over base: a service's check
// over the defaults, or a real server's overrides over its service's check
// (whose written timings are inherited). It also returns what it wrote.
func decodeCheck(n *node, base HealthCheck, inherited written) (HealthCheck, written) {
	c := base
	c.Pos = n.pos("")
	var typ string
	if n.oneOf("type", &typ, checkTypes...) {
		c.Type = CheckType(typ)
	}
	n.duration("interval", &c.Interval, 10*time.Millisecond, time.Hour)
	n.duration("timeout", &c.Timeout, time.Millisecond, time.Hour)
	n.integer("rise", &c.Rise, 1, 100)
	n.integer("fall", &c.Fall, 1, 100)
	var initial string
	if n.oneOf("initial_state", &initial, "healthy", "unhealthy") {
		c.InitialHealthy = initial == "healthy"
	}
	n.port("port", &c.Port)
	n.addr("source_address", &c.SourceAddress)

	n.str("path", &c.Path)
	if n.has("path") && !strings.HasPrefix(c.Path, "/") {
		n.errorf("path", "%q does not start with '/'; expected a request path such as \"/healthz\"", c.Path)
	}
	n.str("host", &c.Host)
	if n.has("expect_status") {
		c.ExpectStatus = decodeStatusRanges(n, "expect_status")
	}
	n.str("expect_body", &c.ExpectBody)
	n.str("tls_server_name", &c.TLSServerName)
	n.boolean("tls_verify", &c.TLSVerify)

	var s string
	if n.str("payload", &s) {
		c.Payload = []byte(s)
	}
	if n.str("expect", &s) {
		c.Expect = []byte(s)
	}

	n.str("query_name", &c.QueryName)
	n.oneOf("query_type", &c.QueryType, dnsTypes...)
	n.oneOf("expect_rcode", &c.ExpectRcode, dnsRcodes...)
	n.str("expect_answer", &c.ExpectAnswer)

	if n.strings("command", &c.Command) && (len(c.Command) == 0 || !filepath.IsAbs(c.Command[0])) {
		n.errorf("command", "expected an array whose first element is an absolute path to the program, such as [\"/usr/local/lib/lbd/check-app\", \"--fast\"] (no shell is involved)")
	}
	n.keepPos("command")
	n.str("user", &c.User)

	for key, types := range checkKeys {
		if n.has(key) && !slices.Contains(types, c.Type) {
			n.errorf(key, "applies only to %s checks, and this check is type = %q", joinTypes(types), c.Type)
		}
	}
	w := written{inherited.interval || n.has("interval"), inherited.timeout || n.has("timeout")}
	timings(n, &c, w)
	required := map[CheckType]string{CheckUDP: "payload", CheckDNS: "query_name", CheckExec: "command"}
	if key, ok := required[c.Type]; ok && !n.has(key) && !checkHas(base, key) {
		n.errorf("", "a %s check needs %s; expected %s = ...", c.Type, key, key)
	}
	n.finish()
	return c, w
}

// timings makes an unwritten timing follow the written one, and checks
// that a probe fits in its interval. A probe may take the whole interval
// (keepalived's connect_timeout may equal delay_loop): one still running
// when the next is due makes that one skip its turn.
func timings(n *node, c *HealthCheck, w written) {
	switch {
	case w.interval && !w.timeout:
		c.Timeout = min(defaultTimeout, c.Interval)
	case w.timeout && !w.interval:
		c.Interval = max(defaultInterval, c.Timeout)
	}
	if c.Type != CheckNone && c.Timeout > c.Interval {
		key := "timeout"
		if !n.has(key) {
			key = "interval"
		}
		n.errorf(key, "timeout (%s) is longer than interval (%s); expected timeout <= interval", c.Timeout, c.Interval)
	}
}

// checkHas reports whether base (a service's check) already sets key, so a
// real server's override need not repeat it.
func checkHas(base HealthCheck, key string) bool {
	switch key {
	case "payload":
		return len(base.Payload) > 0
	case "query_name":
		return base.QueryName != ""
	case "command":
		return len(base.Command) > 0
	}
	return false
}

func joinTypes(types []CheckType) string {
	s := make([]string, len(types))
	for i, t := range types {
		s[i] = strconv.Quote(string(t))
	}
	return strings.Join(s, " and ")
}

// decodeStatusRanges accepts codes and ranges: [200, "301-308"].
func decodeStatusRanges(n *node, key string) []StatusRange {
	var out []StatusRange
	const want = "HTTP status codes (100-599) or ranges such as \"200-399\""
	n.list(key, want, func(k string, v any) {
		var r StatusRange
		var ok bool
		switch x := v.(type) {
		case int64:
			r, ok = StatusRange{int(x), int(x)}, true
		case string:
			a, b, isRange := strings.Cut(x, "-")
			lo, err1 := strconv.Atoi(strings.TrimSpace(a))
			hi, err2 := lo, error(nil)
			if isRange {
				hi, err2 = strconv.Atoi(strings.TrimSpace(b))
			}
			r, ok = StatusRange{lo, hi}, err1 == nil && err2 == nil
		}
		if !ok || r.Min < 100 || r.Max > 599 || r.Min > r.Max {
			n.errorf(k, "%v is not a status code or range; expected %s", v, want)
			return
		}
		out = append(out, r)
	})
	if n.has(key) && len(out) == 0 {
		n.errorf(key, "is empty; expected at least one of %s", want)
	}
	return out
}

// String renders the range as written in the configuration.
func (r StatusRange) String() string {
	if r.Min == r.Max {
		return strconv.Itoa(r.Min)
	}
	return fmt.Sprintf("%d-%d", r.Min, r.Max)
}
