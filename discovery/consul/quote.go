package consul

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// MaxQuoted is how many bytes of a value from Consul errors, problems and
// logs show: registrations are written by others, and a 1 MB service name
// must not make a 1 MB log line.
const MaxQuoted = 80

// Quote quotes s, a value from Consul, for errors, problems and logs: at
// most MaxQuoted bytes of it, cut on a character boundary, then the full
// length, as in "aaaa…"…(1000 bytes).
func Quote(s string) string {
	if len(s) <= MaxQuoted {
		return strconv.Quote(s)
	}
	cut := MaxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(s[:cut]), len(s))
}
