package merge

import (
	"fmt"
	"unicode/utf8"

	"github.com/lbdproject/lbd/discovery/consul"
)

// What one Consul registration, or all of them, may make lbd program.
// Registrations are written by others; past these they are refused with a
// Problem, never silently truncated.
const (
	// maxInstances bounds the real servers a service takes from Consul:
	// each is an IPVS destination, ipset members and a health check, and
	// no deployment behind one VIP needs more.
	maxInstances = 1024
	// maxServices bounds the virtual services Consul may define: each is
	// IPVS services, a bound VIP and checks, on every sync.
	maxServices = 4096
	// maxVIPs bounds the VIPs one registration may claim, so that one
	// registration cannot take a whole VIP pool.
	maxVIPs = 16
	// maxWeight bounds the weight Consul may give a real server. IPVS
	// takes up to 65535 (files may use it); keepalived and common practice
	// stay within 0..256, and a registration asking for more is more
	// likely a mistake or an attempt to draw a service's traffic.
	maxWeight = 256
	// maxMsg bounds a Problem's message, which may quote Consul's data.
	maxMsg = 1024
)

// safely runs f, which works on one registration; a panic on it (a bug
// that some registration triggers) becomes a Problem of subject instead of
// crashing lbd into a restart loop on the same data. It reports whether f
// returned.
func (r *Result) safely(subject string, f func()) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			r.problem(subject, "lbd failed on this registration (panic: %s); it is ignored, please report this bug", clip(fmt.Sprint(p), 200))
			ok = false
		}
	}()
	f()
	return true
}

// clip cuts s to at most n bytes, on a character boundary, saying so.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}

func serviceSubject(name string) string { return "consul service " + consul.Quote(name) }

func instanceSubject(service string, in consul.Instance) string {
	return fmt.Sprintf("consul service %s instance %s on node %s", consul.Quote(service), consul.Quote(in.ID), consul.Quote(in.Node))
}
