package importer

import (
	"errors"
	"net/netip"
	"os"
	"sort"
	"strings"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// Options adjust an import.
type Options struct {
	// Executable reports whether path is a program lbd could run as an
	// exec check on this box (lbd's validation requires it); nil looks at
	// the file system.
	Executable func(path string) bool
}

// Service is one imported [[service]] table.
type Service struct {
	Name string
	TOML string // its comment line and tables
	node *conf.Node
	vips []netip.Addr
	svc  *svc
}

// Result is an import's output.
type Result struct {
	// Globals is what belongs in lbd.toml besides services: [ipvs], and
	// commented-out tables for what needs the admin's input.
	Globals  string
	Services []Service
	Report   Report
}

// TOML is the whole configuration as one file.
func (r Result) TOML() string {
	var b strings.Builder
	b.WriteString(r.Globals)
	for _, s := range r.Services {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s.TOML)
	}
	return b.String()
}

// importer holds one import's state.
type importer struct {
	opts    Options
	globals []unit // lbd.toml's tables, each droppable on its own
	rep     reporter
	groups  map[string]*conf.Node
	names   map[string]bool
	// vrrpNames are the instance and sync group names taken.
	vrrpNames map[string]bool
	claimed   map[string]conf.Pos // VIP:port/protocol and fwmark/family keys taken
	out       []Service
}

// Import maps cfg to lbd's TOML.
func Import(cfg *conf.Config, opts Options) (Result, error) {
	if cfg == nil {
		return Result{}, errors.New("import keepalived: no configuration")
	}
	if opts.Executable == nil {
		opts.Executable = executable
	}
	im := &importer{opts: opts, groups: map[string]*conf.Node{}, names: map[string]bool{}, vrrpNames: map[string]bool{}, claimed: map[string]conf.Pos{}}
	root := &cfg.Root
	for _, g := range root.ChildrenOf("virtual_server_group") {
		im.group(g)
	}
	for i := range root.Children {
		n := &root.Children[i]
		switch n.Keyword {
		case "global_defs":
			im.globalDefs(n)
		case "virtual_server_group":
			// read above; its members are reported with the virtual server that uses it
		case "virtual_server":
			im.virtualServer(n)
		case "vrrp_instance", "vrrp_sync_group":
			// after the services: an instance's addresses may be their VIPs
		default:
			im.topLevel(n)
		}
	}
	im.vrrp(root)
	for i := range im.out {
		im.out[i].TOML = im.render(im.out[i].svc, im.out[i].Name)
	}
	if err := im.validate(); err != nil {
		return Result{}, err
	}
	sortItems(im.rep.items, cfg.Files)
	return Result{Globals: joinUnits(im.globals), Services: im.out, Report: Report{Items: im.rep.items}}, nil
}

// sortItems puts the items in reading order: files as keepalived reads
// them, then lines (they are found in the order of the mapping, which
// reads the services before the VRRP instances).
func sortItems(items []Item, files []string) {
	order := map[string]int{}
	for i, f := range files {
		if _, ok := order[f]; !ok {
			order[f] = i
		}
	}
	rank := func(f string) int {
		if i, ok := order[f]; ok {
			return i
		}
		return len(files)
	}
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i].Pos, items[j].Pos
		if ra, rb := rank(a.File), rank(b.File); ra != rb {
			return ra < rb
		}
		return a.Line < b.Line
	})
}

// unit is one table (or commented block) of lbd.toml, and the statement
// it came from.
type unit struct {
	text string
	node *conf.Node
}

func joinUnits(units []unit) string {
	texts := make([]string, len(units))
	for i, u := range units {
		texts[i] = u.text
	}
	return strings.Join(texts, "\n")
}

// group records a virtual_server_group by name.
func (im *importer) group(n *conf.Node) {
	name, ok := n.Arg(0)
	if !ok {
		im.rep.notMapped(n, "a virtual_server_group needs a name (keepalived refuses it)")
		return
	}
	if prev, dup := im.groups[name]; dup {
		im.rep.notMapped(n, "a second virtual_server_group %q (the first is at %s); lbd uses the first", name, prev.Pos)
		return
	}
	im.groups[name] = n
}

// topLevelNotMapped are keepalived's other top-level sections, with why
// lbd does not take them.
var topLevelNotMapped = map[string]string{
	"vrrp_script":           "lbd tracks its own services' health ([[vrrp]] track_services), not scripts",
	"static_ipaddress":      "lbd does not manage static addresses: configure them with the system's network configuration",
	"static_routes":         "lbd does not manage routes: configure them with the system's network configuration",
	"static_rules":          "lbd does not manage routing rules: configure them with the system's network configuration",
	"garp_group":            "lbd has no gratuitous ARP groups (see [[vrrp]] garp_master_repeat)",
	"track_file":            "lbd has no tracked files",
	"vrrp_track_file":       "lbd has no tracked files",
	"track_process":         "lbd has no tracked processes",
	"vrrp_track_process":    "lbd has no tracked processes",
	"bfd_instance":          "lbd has no BFD",
	"net_namespace":         "lbd runs in the namespace it is started in",
	"net_namespace_ipvs":    "lbd runs in the namespace it is started in",
	"namespace_with_ipsets": "lbd's ipsets are its own",
	"instance":              "lbd has no instances",
	"linkbeat_use_polling":  "lbd follows links by netlink",
}

func (im *importer) topLevel(n *conf.Node) {
	if why, ok := topLevelNotMapped[n.Keyword]; ok {
		im.rep.notMapped(n, "%s", why)
		return
	}
	im.rep.unknown(n, "the top level")
}

// executable reports whether path is a regular file with an execute bit.
func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
