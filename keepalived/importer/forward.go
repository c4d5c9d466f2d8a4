package importer

import (
	"fmt"
	"strconv"
	"strings"
)

// forward is keepalived's lvs_method with its tunnel options.
type forward struct {
	method  string // nat, dr, tun
	tunType string // ipip, gue, gre
	tunPort int
	csum    string // none, checksum, remote
}

// parseForward reads `NAT`, `DR`, `TUN [type ipip|gue port N|gre] [nocsum|csum|remcsum]`.
func parseForward(args []string) (forward, error) {
	if len(args) == 0 {
		return forward{}, fmt.Errorf("no method given")
	}
	f := forward{tunType: "ipip", csum: "none"}
	switch strings.ToUpper(args[0]) {
	case "NAT":
		f.method = "nat"
	case "DR":
		f.method = "dr"
	case "TUN":
		f.method = "tun"
	default:
		return forward{}, fmt.Errorf("lbd forwards by NAT, DR or TUN, not %q", args[0])
	}
	rest := args[1:]
	if f.method != "tun" && len(rest) > 0 {
		return forward{}, fmt.Errorf("unexpected %q after %s", rest[0], args[0])
	}
	for i := 0; i < len(rest); i++ {
		switch rest[i] {
		case "type":
			if i+1 >= len(rest) {
				return forward{}, fmt.Errorf("type without a value")
			}
			i++
			f.tunType = rest[i]
			if f.tunType != "ipip" && f.tunType != "gue" && f.tunType != "gre" {
				return forward{}, fmt.Errorf("tunnel type %q is not ipip, gue or gre", f.tunType)
			}
		case "port":
			if i+1 >= len(rest) {
				return forward{}, fmt.Errorf("port without a value")
			}
			i++
			p, err := strconv.ParseUint(rest[i], 10, 16)
			if err != nil || p == 0 {
				return forward{}, fmt.Errorf("tunnel port %q is not 1–65535", rest[i])
			}
			f.tunPort = int(p)
		case "nocsum":
			f.csum = "none"
		case "csum":
			f.csum = "checksum"
		case "remcsum":
			f.csum = "remote"
		default:
			return forward{}, fmt.Errorf("unexpected %q in the tunnel options", rest[i])
		}
	}
	if (f.tunType == "gue") != (f.tunPort != 0) {
		return forward{}, fmt.Errorf("a GUE tunnel needs a port, and only GUE takes one")
	}
	if f.tunType == "ipip" && f.csum != "none" || f.csum == "remote" && f.tunType != "gue" {
		return forward{}, fmt.Errorf("checksum option %q does not apply to %s", f.csum, f.tunType)
	}
	return f, nil
}

// write adds the method's keys: the tunnel options only when they are not
// lbd's defaults.
func (f forward) write(t *table) {
	t.str("forward", f.method)
	if f.method != "tun" {
		return
	}
	if f.tunType != "ipip" {
		t.str("tunnel_type", f.tunType)
	}
	if f.tunPort != 0 {
		t.num("tunnel_port", int64(f.tunPort))
	}
	if f.csum != "none" {
		t.str("tunnel_checksum", f.csum)
	}
}
