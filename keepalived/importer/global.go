package importer

import (
	"strconv"
	"strings"
	"time"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// maxIPVSTimeout is lbd's bound on [ipvs] timeouts (30 days).
const maxIPVSTimeout = 30 * 24 * time.Hour

// globalDefs maps global_defs: lvs_timeouts to [ipvs], lvs_sync_daemon to
// a commented [ha.ipvs_sync] (lbd needs the peer's address), the rest as
// not needed or not mapped.
func (im *importer) globalDefs(n *conf.Node) {
	var ipvs table
	for i := range n.Children {
		c := &n.Children[i]
		switch {
		case c.Keyword == "lvs_timeouts":
			im.lvsTimeouts(c, &ipvs)
		case c.Keyword == "lvs_sync_daemon" || c.Keyword == "lvs_sync_daemon_interface":
			im.syncDaemon(c)
		case globalNotMapped[c.Keyword] != "":
			im.rep.notMapped(c, "%s", globalNotMapped[c.Keyword])
		case c.Keyword == "vrrp_version":
			// read by vrrp: the instances' default version
		case unneededGlobal(c.Keyword):
			im.rep.add(c, Unneeded, "not needed by lbd")
		default:
			im.rep.unknown(c, "global_defs")
		}
	}
	if len(ipvs) > 0 {
		var b strings.Builder
		b.WriteString(comment(n.Pos.String()+": global_defs lvs_timeouts") + "[ipvs]\n")
		ipvs.write(&b, "")
		im.globals = append(im.globals, unit{b.String(), n})
	}
}

// globalNotMapped are global_defs keywords that change what keepalived
// does to the kernel or the services, which lbd does not do.
var globalNotMapped = map[string]string{
	"lvs_flush":                "lbd never flushes the IPVS table: it changes only the virtual servers it created or adopts",
	"lvs_flush_onstop":         "lbd leaves the dataplane in place when it stops; `lbd cleanup` removes what it made",
	"lvs_notify_fifo":          "lbd has no notify FIFO: follow `lbd status` or its metrics",
	"lvs_notify_fifo_script":   "lbd has no notify FIFO",
	"notify_fifo":              "lbd has no notify FIFO",
	"notify_fifo_script":       "lbd has no notify FIFO",
	"smtp_alert":               "lbd sends no mail: alert on its metrics",
	"smtp_alert_checker":       "lbd sends no mail: alert on its metrics",
	"smtp_alert_vrrp":          "lbd sends no mail: alert on its metrics",
	"enable_traps":             "lbd has no SNMP",
	"enable_snmp_checker":      "lbd has no SNMP: use its Prometheus metrics",
	"enable_snmp_vrrp":         "lbd has no SNMP: use its Prometheus metrics",
	"enable_snmp_keepalived":   "lbd has no SNMP: use its Prometheus metrics",
	"enable_snmp_rfc":          "lbd has no SNMP: use its Prometheus metrics",
	"enable_snmp_rfcv2":        "lbd has no SNMP: use its Prometheus metrics",
	"enable_snmp_rfcv3":        "lbd has no SNMP: use its Prometheus metrics",
	"checker_log_all_failures": "lbd logs every health transition",
}

// unneededPrefixes and unneededGlobals are global_defs keywords that tune
// keepalived itself (its identity, mail, processes, VRRP defaults and
// logging): lbd needs none of them.
var unneededPrefixes = []string{"vrrp_", "notification_email", "smtp_", "checker_", "bfd_", "dbus", "snmp_", "script_", "instance"}

var unneededGlobals = map[string]bool{
	"router_id": true, "dynamic_interfaces": true, "enable_script_security": true, "script_user": true,
	"max_auto_priority": true, "min_auto_priority_delay": true, "no_email_faults": true, "default_interface": true,
	"process_names": true, "process_name": true, "vrrp_process_name": true, "checker_process_name": true,
	"umask": true, "nftables": true, "nftables_counters": true, "nftables_ifindex": true, "nftables_priority": true,
	"uninitialised_priority": true, "startup_script": true, "startup_script_timeout": true,
	"shutdown_script": true, "shutdown_script_timeout": true, "random_seed": true, "reload_time_file": true,
	"reload_repeat": true, "reload_file": true, "data_use_instance": true, "child_wait_time": true,
	"linkbeat_interfaces": true, "disable_local_igmp": true, "use_pid_dir": true, "local_name": true,
	"net_namespace": true, "namespace_with_ipsets": true, "include_check": true,
}

func unneededGlobal(kw string) bool {
	if unneededGlobals[kw] || strings.HasPrefix(kw, "lvs_sync_daemon") {
		return true
	}
	for _, p := range unneededPrefixes {
		if strings.HasPrefix(kw, p) {
			return true
		}
	}
	return false
}

// lvsTimeouts maps `lvs_timeouts [tcp N] [tcpfin N] [udp N]`.
func (im *importer) lvsTimeouts(n *conf.Node, ipvs *table) {
	keys := map[string]string{"tcp": "tcp_timeout", "tcpfin": "tcp_fin_timeout", "udp": "udp_timeout"}
	args := n.Args
	for i := 0; i < len(args); i++ {
		key, ok := keys[args[i]]
		if !ok || i+1 >= len(args) {
			im.rep.notMapped(n, "%q is not tcp N, tcpfin N or udp N; that part is not written", args[i])
			continue
		}
		i++
		secs, err := strconv.ParseUint(args[i], 10, 32)
		d := time.Duration(secs) * time.Second
		if err != nil || d > maxIPVSTimeout {
			im.rep.notMapped(n, "%s %q is not a number of seconds up to 30 days (lbd's bound); not written", args[i-1], args[i])
			continue
		}
		ipvs.set(key, tomlDuration(d))
	}
}

// syncDaemon writes keepalived's sync daemon as a commented [ha.ipvs_sync]:
// lbd needs the peer's address, which keepalived's configuration lacks.
func (im *importer) syncDaemon(n *conf.Node) {
	iface, ok := n.Arg(0)
	if !ok {
		im.rep.notMapped(n, "no interface given")
		return
	}
	var t table
	t.str("interface", iface)
	t.str("peer", "PEER-ADDRESS")
	names := map[string]string{"id": "sync_id", "group": "group", "port": "port", "ttl": "ttl", "maxlen": "max_packet_length"}
	// Args: INTERFACE [INSTANCE] [id N] [maxlen N] [port N] [ttl N] [group ADDR]
	for i := 1; i < len(n.Args); i++ {
		key, ok := names[n.Args[i]]
		if !ok || i+1 >= len(n.Args) {
			continue // the VRRP instance it follows: lbd runs both roles at once
		}
		i++
		if key == "group" {
			t.str(key, n.Args[i])
		} else if v, err := strconv.ParseUint(n.Args[i], 10, 32); err == nil {
			t.num(key, int64(v))
		} else {
			im.rep.notMapped(n, "%s %q is not a number", n.Args[i-1], n.Args[i])
		}
	}
	var b strings.Builder
	b.WriteString(comment(n.Pos.String() + ": " + words(n)))
	b.WriteString(comment("Fill in the other box's address on " + iface + " and uncomment:"))
	b.WriteString("# [ha.ipvs_sync]\n")
	t.write(&b, "# ")
	im.globals = append(im.globals, unit{b.String(), n})
	im.rep.notMapped(n, "lbd's [ha.ipvs_sync] needs the peer's address on %s, which keepalived does not have: written commented out; add `peer` and uncomment it (it also needs [[vrrp]])", iface)
}
