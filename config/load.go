package config

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/BurntSushi/toml"

	"github.com/lbdproject/lbd/config/internal/keypos"
	"github.com/lbdproject/lbd/config/internal/tree"
	"github.com/lbdproject/lbd/lvs"
)

// ConfDirOf returns the drop-in directory that belongs to a main file.
func ConfDirOf(path string) string {
	return filepath.Join(filepath.Dir(path), DefaultConfDir)
}

// Files returns the files a load of path reads: path itself, then the
// *.toml files of its conf.d directory in lexical order. Hidden files are
// skipped so that editors' and package managers' leftovers never count.
func Files(path string) ([]string, error) {
	files := []string{path}
	entries, err := os.ReadDir(ConfDirOf(path))
	if errors.Is(err, os.ErrNotExist) {
		return files, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading drop-in directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || filepath.Ext(name) != ".toml" {
			continue
		}
		files = append(files, filepath.Join(ConfDirOf(path), name))
	}
	return files, nil
}

// Load reads, merges and validates the main file at path and its conf.d
// drop-ins. It returns either a complete configuration or an ErrorList with
// every problem found (or an I/O error); never a partial configuration.
func Load(path string) (*Config, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	contents := make([][]byte, len(files))
	for i, f := range files {
		if contents[i], err = os.ReadFile(f); err != nil {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
	}
	return parse(files, func(i int) string {
		// The bytes are Load's own and never change: they can be the text
		// without a copy. Nothing keeps a piece of it (see tree.Parse and
		// node.str), so each file's bytes go once it is parsed.
		b := contents[i]
		contents[i] = nil
		return unsafe.String(unsafe.SliceData(b), len(b))
	})
}

// Parse is Load on contents already read: files[0] is the main file, the
// rest are drop-ins that may hold only [[service]] tables.
func Parse(files []string, contents [][]byte) (*Config, error) {
	return parse(files, func(i int) string { return string(contents[i]) })
}

// parse parses and decodes files; text(i) returns the content of files[i].
func parse(files []string, text func(int) string) (*Config, error) {
	cfg := Defaults()
	cfg.Files = slices.Clone(files)
	var errs ErrorList
	for i, name := range files {
		root, ok := parseTOML(name, text(i), &errs)
		if !ok {
			continue
		}
		if i == 0 {
			decodeGlobals(root, &cfg)
		} else {
			refuseGlobals(root, files[0])
		}
		ts := root.tables("service")
		cfg.Services = slices.Grow(cfg.Services, len(ts))
		root.src.reals = &realServers{want: countRealServers(ts)}
		for j, t := range ts {
			cfg.Services = append(cfg.Services, decodeService(t))
			// Nothing looks into a decoded service's table again: let its
			// memory go while the next ones are decoded.
			t.t.Drop()
			ts[j] = nil
		}
		root.finish()
	}
	if len(errs) == 0 {
		validate(&cfg, &errs)
	}
	for _, s := range cfg.Services {
		if s.Consul != nil || s.Register != nil {
			cfg.Consul.Enabled = true
		}
	}
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	return &cfg, nil
}

// countRealServers counts the tables in the real_server arrays of services,
// which is how many RealServers decodeService will need.
func countRealServers(services []*node) int {
	n := 0
	for _, s := range services {
		if v, ok := s.t.Get("real_server"); ok {
			if a, ok := v.(*tree.Array); ok {
				for _, e := range a.Elems {
					if _, ok := e.(*tree.Table); ok {
						n++
					}
				}
			}
		}
	}
	return n
}

// parseTOML checks the syntax of one file and prepares it for decoding.
// Plain files are read by tree.Parse, which finds the key positions on the
// way; anything else by BurntSushi/toml (and keypos for the positions),
// which has the last word on what is valid TOML and how it is refused.
func parseTOML(name, text string, errs *ErrorList) (*node, bool) {
	if !forceGeneric {
		if root, ok := tree.Parse(text); ok {
			return newNode(&source{name: name, tree: root, errs: errs}, "", root), true
		}
	}
	var m map[string]any
	if _, err := toml.Decode(text, &m); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			msg := "TOML syntax error: " + pe.Message
			if pe.Usage != "" {
				msg += " (" + strings.TrimSpace(strings.SplitN(pe.Usage, "\n", 2)[0]) + ")"
			}
			*errs = append(*errs, &Error{Pos: Pos{File: name, Line: pe.Position.Line, Col: pe.Position.Col}, Msg: msg})
		} else {
			*errs = append(*errs, &Error{Pos: Pos{File: name}, Msg: "TOML syntax error: " + err.Error()})
		}
		return nil, false
	}
	src := &source{name: name, pos: keypos.Scan(text), errs: errs}
	return newNode(src, "", tree.FromMap(m)), true
}

// forceGeneric makes every file go the way of BurntSushi/toml and keypos,
// so that tests can compare the two ways.
var forceGeneric = false

// refuseGlobals keeps global settings in the main file only, so that one
// place says how the box behaves.
func refuseGlobals(root *node, mainFile string) {
	for _, k := range []string{"sync", "dataplane", "ipvs", "status", "consul"} {
		if _, ok := root.get(k); ok {
			root.errorf(k, "global settings are accepted only in the main file %s; drop-in files hold [[service]] tables", mainFile)
		}
	}
}

// validate runs the checks that span services and files.
func validate(cfg *Config, errs *ErrorList) {
	type claim struct {
		service string
		pos     Pos
	}
	// what is claimed: a VIP:port/protocol, or a node port/protocol (with
	// no address).
	type what struct {
		ap    netip.AddrPort
		proto lvs.Protocol
	}
	names := make(map[string]Pos, len(cfg.Services))
	claims := make(map[what]claim, len(cfg.Services))
	add := func(s *Service, key, format string, args ...any) {
		*errs = append(*errs, &Error{Pos: s.at(key), Key: s.path + "." + key, Msg: fmt.Sprintf(format, args...)})
	}
	claimOnce := func(s *Service, w what, key string) {
		if c, dup := claims[w]; dup {
			desc := fmt.Sprintf("%s/%s", w.ap, w.proto)
			if !w.ap.Addr().IsValid() {
				desc = fmt.Sprintf("node port %d/%s", w.ap.Port(), w.proto)
			}
			add(s, key, "%s is claimed by service %q here and by service %q at %s; expected each VIP:port/protocol in one service", desc, s.Name, c.service, c.pos)
			return
		}
		claims[w] = claim{s.Name, s.at(key)}
	}
	for i := range cfg.Services {
		s := &cfg.Services[i]
		if p, dup := names[s.Name]; dup {
			add(s, "name", "service name %q is already used by the service at %s; expected unique names", s.Name, p)
		} else {
			names[s.Name] = s.at("name")
		}
		for j, v := range s.VIPs {
			claimOnce(s, what{netip.AddrPortFrom(v, s.Port), s.Protocol}, "vips["+strconv.Itoa(j)+"]")
		}
		if s.NodePort == 0 {
			continue
		}
		claimOnce(s, what{netip.AddrPortFrom(netip.Addr{}, s.NodePort), s.Protocol}, "node_port")
		d := cfg.Dataplane
		if len(d.NodeCIDRs) == 0 {
			add(s, "node_port", "service %q is NodePort-like but no node addresses are configured; expected node_cidrs = [...] in [dataplane] of %s", s.Name, cfg.Files[0])
		}
		if s.NodePort < d.NodePortMin || s.NodePort > d.NodePortMax {
			add(s, "node_port", "%d is outside node_port_range %d-%d; expected a port inside it", s.NodePort, d.NodePortMin, d.NodePortMax)
		}
	}
}
