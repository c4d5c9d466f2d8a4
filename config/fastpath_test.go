package config

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// parseBoth parses the files both ways: plain files with tree.Parse, and
// every file with BurntSushi/toml and keypos.
func parseBoth(t testing.TB, files []string, contents [][]byte) (fast, generic *Config, fastErr, genericErr error) {
	t.Helper()
	fast, fastErr = Parse(files, contents)
	forceGeneric = true
	defer func() { forceGeneric = false }()
	generic, genericErr = Parse(files, contents)
	return fast, generic, fastErr, genericErr
}

// sameOutcome fails unless both ways gave the same configuration or the
// same errors, at the same positions, in the same order.
func sameOutcome(t testing.TB, what string, fast, generic *Config, fastErr, genericErr error) {
	t.Helper()
	var fl, gl ErrorList
	errors.As(fastErr, &fl)
	errors.As(genericErr, &gl)
	switch {
	case (fastErr == nil) != (genericErr == nil):
		t.Fatalf("%s: error %v, generic error %v", what, fastErr, genericErr)
	case fastErr != nil && (fl == nil || gl == nil):
		t.Fatalf("%s: errors %T and %T", what, fastErr, genericErr)
	case fastErr != nil:
		if len(fl) != len(gl) {
			t.Fatalf("%s: %d errors, generic %d:\n%v\n--\n%v", what, len(fl), len(gl), fastErr, genericErr)
		}
		for i := range fl {
			if *fl[i] != *gl[i] {
				t.Errorf("%s: error %d:\n  %v\n  generic: %v", what, i, fl[i], gl[i])
			}
		}
	case !reflect.DeepEqual(fast, generic):
		t.Fatalf("%s: configurations differ:\n%+v\n--\n%+v", what, fast, generic)
	}
}

// loadBoth reads a configuration as Load does and parses it both ways.
func loadBoth(t testing.TB, path string) {
	t.Helper()
	files, err := Files(path)
	if err != nil {
		t.Fatal(err)
	}
	contents := make([][]byte, len(files))
	for i, f := range files {
		if contents[i], err = os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	fast, generic, fe, ge := parseBoth(t, files, contents)
	sameOutcome(t, path, fast, generic, fe, ge)
}

// TestFastPathAgrees checks that reading plain files with tree.Parse
// changes nothing: the same configurations, the same errors at the same
// places, as with BurntSushi/toml and keypos alone.
func TestFastPathAgrees(t *testing.T) {
	for _, tt := range invalidConfigs {
		t.Run(tt.name, func(t *testing.T) { loadBoth(t, writeConfig(t, tt.files)) })
	}
	valid := map[string]map[string]string{
		"defaults": {"lbd.toml": svc + "[[service.real_server]]\naddress = \"10.0.0.1\"\n" +
			"[[service]]\nname = \"u\"\nvips = [\"2001:db8::53\"]\nport = 53\nprotocol = \"udp\"\nreal_server = [{address = \"2001:db8:1::5\"}]\n"},
		"consul": {"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = [\"198.51.100.0/24\", \"2001:db8:100::/64\"]\nreal_server_networks = [\"10.0.0.0/8\"]\n" +
			svc + "[service.consul_register]\ntags = [\"vip\"]\n[service.consul]\nservice = \"web\"\n[service.health_check]\ntype = \"tcp\"\n"},
		"overrides": {"lbd.toml": svc + "[service.health_check]\ntype = \"http\"\npath = \"/h\"\nexpect_status = [200, \"300-399\"]\n" +
			"real_server = [{ address = \"10.0.0.1\", health_check = { port = 8081, path = \"/x\" } }, { address = \"10.0.0.2\", weight = 0 }]\n"},
		"bench": {"lbd.toml": benchTOML(50, 10)},
		"two VIPs claimed twice": {"lbd.toml": svc + "[[service]]\nname = \"b\"\nvips = [\"192.0.2.11\", \"192.0.2.10\"]\nport = 80\n",
			"conf.d/x.toml": "[[service]]\nname = \"c\"\nvips = [\"192.0.2.11\"]\nport = 80\n"},
		"quoted and dotted keys": {"lbd.toml": "[[service]]\n\"name\" = \"web\"\nvips = [\"192.0.2.10\"]\nport = 80\nhealth_check.type = \"none\"\n"},
		"escapes":                {"lbd.toml": svc + "[service.health_check]\ntype = \"udp\"\npayload = \"ping\\n\"\nexpect = 'pong'\n"},
	}
	for name, files := range valid {
		t.Run(name, func(t *testing.T) { loadBoth(t, writeConfig(t, files)) })
	}
	loadBoth(t, "../examples/lbd.toml")
}

// FuzzFastPath is TestFastPathAgrees on any main file.
func FuzzFastPath(f *testing.F) {
	for _, p := range []string{"../examples/lbd.toml", "../examples/conf.d/dns.toml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	for _, tt := range invalidConfigs {
		f.Add(tt.files["lbd.toml"])
	}
	entries, _ := os.ReadDir(filepath.Join("testdata", "fuzz", "FuzzParse"))
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzParse", e.Name()))
		if err != nil {
			f.Fatal(err)
		}
		// The corpus file's one value is a quoted Go string.
		if _, v, ok := strings.Cut(string(b), "string("); ok {
			if s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimSpace(v), ")")); err == nil {
				f.Add(s)
			}
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		fast, generic, fe, ge := parseBoth(t, []string{"lbd.toml"}, [][]byte{[]byte(text)})
		sameOutcome(t, "lbd.toml", fast, generic, fe, ge)
	})
}

// TestFastPathAgreesRandom compares both ways on generated documents that
// look like lbd.toml files, with mistakes and unusual TOML mixed in, which
// byte-level fuzzing rarely puts together.
func TestFastPathAgreesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := range n {
		text := randomConfig(rng)
		fast, generic, fe, ge := parseBoth(t, []string{"lbd.toml"}, [][]byte{[]byte(text)})
		sameOutcome(t, fmt.Sprintf("document %d:\n%s", i, text), fast, generic, fe, ge)
	}
}

func randomConfig(rng *rand.Rand) string {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	maybe := func(p float64) bool { return rng.Float64() < p }
	nl := "\n"
	if maybe(0.1) {
		nl = "\r\n"
	}
	addr := func() string {
		return pick(fmt.Sprintf("10.0.%d.%d", rng.IntN(3), rng.IntN(5)+1), "192.0.2.10", "2001:db8::5", "127.0.0.1", "nope", "10.0.0.1")
	}
	value := func() string {
		switch rng.IntN(12) {
		case 0:
			return fmt.Sprint(rng.IntN(70000) - 5)
		case 1:
			return pick("true", "false")
		case 2:
			return pick("0.5", "1.5", "-0.0", "1e3", "0x10", "1_000")
		case 3:
			return pick(`"1s"`, `"30s"`, `"5m"`, `"2h"`, `"bad"`, `'10s'`)
		case 4:
			return `["` + addr() + `"` + pick("", `, "`+addr()+`"`, ",") + "]"
		case 5:
			return "{ " + pick("", "type = \"none\"", "port = 8080", "type = \"tcp\", interval = \"1s\"") + " }"
		case 6:
			return pick(`"wrr"`, `"rr"`, `"sh"`, `"tcp"`, `"udp"`, `"sctp"`, `"drain"`, `"arp"`, `"route"`)
		case 7:
			return pick(`["sh-port"]`, `[]`, `[200, "300-399"]`, `["/bin/true"]`)
		case 8:
			return pick(`"ünï"`, `"a\tb"`, `"esc\"aped"`, `"""multi"""`, `1979-05-27`)
		case 9:
			return `"` + addr() + `"`
		case 10:
			return `"` + addr() + `:80"`
		}
		return fmt.Sprint(rng.IntN(100))
	}
	key := func(keys ...string) string {
		k := pick(keys...)
		switch {
		case maybe(0.03):
			return `"` + k + `"`
		case maybe(0.03):
			return k + "x"
		case maybe(0.02):
			return "health_check.type"
		}
		return k
	}
	serviceKeys := []string{"name", "vips", "port", "protocol", "node_port", "scheduler", "scheduler_flags", "session_affinity",
		"session_affinity_timeout", "source_ranges", "snat", "announce", "announce_interface", "on_unhealthy", "drain_timeout",
		"quorum", "quorum_fallback", "sorry_server", "health_check", "adopt"}
	realKeys := []string{"address", "port", "weight", "health_check"}
	checkKeys := []string{"type", "interval", "timeout", "rise", "fall", "initial_state", "port", "path", "host", "expect_status",
		"payload", "query_name", "command", "user"}
	var b strings.Builder
	w := func(s string) { b.WriteString(s + nl) }
	if maybe(0.3) {
		w("# lbd — generated")
	}
	if maybe(0.3) {
		w("[sync]")
		w("sync_period = " + value())
		if maybe(0.3) {
			w("burst = " + value())
		}
	}
	if maybe(0.2) {
		w("[dataplane]")
		w(key("node_cidrs", "local_networks", "interface") + " = " + pick(`["10.0.0.0/8"]`, `["10.1.2.3/16"]`, `"lbd0"`, value()))
	}
	for s := range rng.IntN(5) {
		w(pick("[[service]]", "[[service]]", "[[ service ]]", "[service]"))
		w("name = " + pick(fmt.Sprintf(`"svc%d"`, s), `"svc0"`, `"bad name"`, value()))
		if maybe(0.9) {
			w("vips = [" + pick(`"192.0.2.`+fmt.Sprint(s+1)+`"`, `"192.0.2.1"`, `"2001:db8::1"`) + pick("", `, "192.0.2.1"`) + "]")
		}
		if maybe(0.9) {
			w("port = " + pick("80", "443", "70000", `"80"`))
		}
		for range rng.IntN(4) {
			w(key(serviceKeys...) + " = " + value() + pick("", " # comment", "#c"))
		}
		if maybe(0.5) {
			w("real_server = [")
			for range rng.IntN(4) {
				var kv []string
				for range rng.IntN(4) {
					kv = append(kv, key(realKeys...)+" = "+value())
				}
				if maybe(0.8) {
					kv = append([]string{"address = \"" + addr() + "\""}, kv...)
				}
				w("  { " + strings.Join(kv, ", ") + pick(" },", " }", ", },"))
			}
			w("]")
		}
		if maybe(0.3) {
			w(pick("[service.health_check]", "[service.consul]", "[service.consul_register]"))
			for range rng.IntN(4) {
				w(key(checkKeys...) + " = " + value())
			}
		}
		for range rng.IntN(3) {
			w("[[service.real_server]]")
			w("address = \"" + addr() + "\"")
			for range rng.IntN(3) {
				w(key(realKeys...) + " = " + value())
			}
			if maybe(0.2) {
				w("[service.real_server.health_check]")
				w(key(checkKeys...) + " = " + value())
			}
		}
	}
	if maybe(0.1) {
		w(pick("[sync]", "x = 1", "[service.x]", "[[service.real_server]]"))
	}
	return b.String()
}
