package config

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// vinst is an instance with its required keys (lines 1-4); vbase adds an
// address (line 5), so that keys appended to it start at line 6.
const (
	vinst = "[[vrrp]]\nname = \"o\"\ninterface = \"eth0\"\nvirtual_router_id = 51\n"
	vbase = vinst + "addresses = [\"198.18.2.10/24\"]\n"
)

// vsvc is a [[service]] table named name on vip:port.
func vsvc(name, vip string, port int) string {
	return fmt.Sprintf("[[service]]\nname = %q\nvips = [%q]\nport = %d\n", name, vip, port)
}

// vrrpInvalid are configurations whose [[vrrp]] or [[vrrp_sync_group]]
// tables must be refused, with the place and a fragment of each error.
var vrrpInvalid = []invalidConfig{
	{"required keys missing", map[string]string{"lbd.toml": "[[vrrp]]\n"},
		[][2]string{{"lbd.toml:1:1", "vrrp[0]: VRRP instance has no name"}, {"lbd.toml:1:1", `VRRP instance "" has no interface`},
			{"lbd.toml:1:1", "has no virtual_router_id; expected virtual_router_id = 1..255"}, {"lbd.toml:1:1", `instance "" moves nothing`}}},
	{"bad name, interface and router ID", map[string]string{"lbd.toml": "[[vrrp]]\nname = \"a b\"\ninterface = \"eth0:1\"\nvirtual_router_id = 256\naddresses = [\"198.18.2.10\"]\n"},
		[][2]string{{"lbd.toml:2:1", `vrrp[0].name: "a b" is not a valid instance name`}, {"lbd.toml:3:1", `vrrp[0].interface: "eth0:1" is not a valid interface name`},
			{"lbd.toml:4:1", "vrrp[0].virtual_router_id: 256 is out of range; expected an integer from 1 to 255"}}},
	{"wrong types", map[string]string{"lbd.toml": "[[vrrp]]\nname = \"o\"\ninterface = \"eth0\"\nvirtual_router_id = \"51\"\naddresses = \"198.18.2.10\"\n"},
		[][2]string{{"lbd.toml:4:1", "virtual_router_id: is a string; expected an integer from 1 to 255"},
			{"lbd.toml:5:1", `vrrp[0].addresses: is a string; expected an array of addresses such as "198.18.2.10/24"`}}},
	{"unknown key", map[string]string{"lbd.toml": vbase + "advert_intervl = 1\nvirtual_ipaddress = []\n"},
		[][2]string{{"lbd.toml:6:1", `vrrp[0].advert_intervl: unknown key (did you mean "advert_interval"?); accepted in [vrrp]: name, interface, virtual_router_id, version, priority, advert_interval`},
			{"lbd.toml:7:1", "vrrp[0].virtual_ipaddress: unknown key"}}},
	{"priority 255", map[string]string{"lbd.toml": vbase + "priority = 255\n"},
		[][2]string{{"lbd.toml:6:1", `vrrp[0].priority: 255 is the address owner's priority (keepalived's "priority 255"): lbd never owns the addresses it moves; expected 1 to 254`}}},
	{"tracking", map[string]string{"lbd.toml": vbase + "track_syncs = -1\ntrack_services = [\"nope\"]\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].track_syncs: -1 is out of range; expected an integer from 0 to 1000"},
			{"lbd.toml:7:1", `vrrp[0].track_services[0]: no service is named "nope" in the files`}}},
	{"priority 0", map[string]string{"lbd.toml": vbase + "priority = 0\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].priority: 0 is out of range; expected an integer from 1 to 254"}}},
	{"version 4", map[string]string{"lbd.toml": vbase + "version = 4\nadvert_interval = \"15ms\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].version: 4 is out of range; expected an integer from 2 to 3"}}},
	{"version 2 interval below a second", map[string]string{"lbd.toml": vbase + "version = 2\nadvert_interval = \"200ms\"\n"},
		[][2]string{{"lbd.toml:7:1", "vrrp[0].advert_interval: 200ms is not a whole number of seconds from 1s to 255s, which VRRPv2 carries; expected whole seconds, or version = 3 for an interval from 10ms to 40.95s"}}},
	{"version 2 interval in fractions", map[string]string{"lbd.toml": vbase + "version = 2\nadvert_interval = \"1.5s\"\n"},
		[][2]string{{"lbd.toml:7:1", "1.5s is not a whole number of seconds"}}},
	{"version 3 interval not centiseconds", map[string]string{"lbd.toml": vbase + "advert_interval = \"15ms\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].advert_interval: 15ms is not a whole number of centiseconds, which VRRPv3 carries; expected a multiple of 10ms"}}},
	{"version 3 interval too long", map[string]string{"lbd.toml": vbase + "advert_interval = \"41s\"\n"},
		[][2]string{{"lbd.toml:6:1", `41s is out of range; expected a duration from 10ms to 40.95s`}}},
	{"preempt_delay without preempt", map[string]string{"lbd.toml": vbase + "preempt_delay = \"10s\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].preempt_delay: has no effect without preempt = true (lbd does not preempt by default)"}}},
	{"preempt_delay too long", map[string]string{"lbd.toml": vbase + "preempt = true\npreempt_delay = \"1001s\"\n"},
		[][2]string{{"lbd.toml:7:1", "1001s is out of range; expected a duration from 0s to 16m40s"}}},
	{"unicast_source without peers", map[string]string{"lbd.toml": vbase + "unicast_source = \"198.18.2.2\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].unicast_source: is only used with unicast_peers"}}},
	{"empty unicast_peers", map[string]string{"lbd.toml": vbase + "unicast_peers = []\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].unicast_peers: is empty; expected the peers' addresses, or no unicast_peers for multicast adverts"}}},
	{"bad peers", map[string]string{"lbd.toml": vbase + "unicast_peers = [\n  \"198.18.2.3\",\n  \"2001:2::3\",\n  \"198.18.2.3\",\n  \"224.0.0.18\",\n]\n"},
		[][2]string{{"lbd.toml:8:3", "vrrp[0].unicast_peers[1]: 2001:2::3 is IPv6 but the instance advertises IPv4; expected a peer of the instance's family"},
			{"lbd.toml:9:3", "vrrp[0].unicast_peers[2]: 198.18.2.3 is listed twice (also unicast_peers[0])"},
			{"lbd.toml:10:3", "vrrp[0].unicast_peers[3]: 224.0.0.18 is multicast; expected the unicast address of a peer"}}},
	{"unicast_source is a peer", map[string]string{"lbd.toml": vbase + "unicast_peers = [\"198.18.2.3\"]\nunicast_source = \"198.18.2.3\"\n"},
		[][2]string{{"lbd.toml:7:1", "198.18.2.3 is also one of unicast_peers; expected this box's own address"}}},
	{"unicast_source of the other family, and moving", map[string]string{"lbd.toml": vbase + "unicast_peers = [\"198.18.2.3\"]\nunicast_source = \"2001:2::2\"\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.10/24\"]\nunicast_peers = [\"198.18.3.3\"]\nunicast_source = \"198.18.3.10\"\n"},
		[][2]string{{"lbd.toml:7:1", "vrrp[0].unicast_source: 2001:2::2 is IPv6 but the instance advertises IPv4"},
			{"lbd.toml:14:1", "vrrp[1].unicast_source: 198.18.3.10 is one of the instance's own addresses, which move; expected an address that stays on this box"}}},
	{"version 2 with IPv6 peers only", map[string]string{"lbd.toml": vinst + "version = 2\nunicast_peers = [\"2001:2::3\"]\nservices = [\"web\"]\n" + vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:6:18", "vrrp[0].unicast_peers[0]: 2001:2::3 is IPv6, and VRRPv2 is IPv4 only; expected version = 3 for IPv6 adverts"}}},
	{"AH", map[string]string{"lbd.toml": vbase + "version = 2\nauth_type = \"AH\"\n"},
		[][2]string{{"lbd.toml:7:1", `vrrp[0].auth_type: IPsec AH authentication is not supported (keepalived deprecated it); expected auth_type = "pass" or none`}}},
	{"auth with version 3", map[string]string{"lbd.toml": vbase + "auth_type = \"pass\"\nauth_pass = \"s3cret\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].auth_type: VRRPv3 has no authentication (RFC 5798 removed it); expected no auth_type, or version = 2"}}},
	{"auth_type in capitals", map[string]string{"lbd.toml": vbase + "version = 2\nauth_type = \"PASS\"\nauth_pass = \"s3cret\"\n"},
		[][2]string{{"lbd.toml:7:1", `vrrp[0].auth_type: "PASS" is not accepted (did you mean "pass"?); expected one of: pass`}}},
	{"auth_type without auth_pass", map[string]string{"lbd.toml": vbase + "version = 2\nauth_type = \"pass\"\n"},
		[][2]string{{"lbd.toml:7:1", `vrrp[0].auth_type: "pass" needs a password; expected auth_pass = "..." (1 to 8 bytes)`}}},
	{"auth_pass without auth_type", map[string]string{"lbd.toml": vbase + "version = 2\nauth_pass = \"s3cret\"\n"},
		[][2]string{{"lbd.toml:7:1", `vrrp[0].auth_pass: is only used with auth_type = "pass"`}}},
	{"auth_pass too long and empty", map[string]string{"lbd.toml": vbase + "version = 2\nauth_type = \"pass\"\nauth_pass = \"s3cret-too-long\"\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.10/24\"]\nversion = 2\nauth_type = \"pass\"\nauth_pass = \"\"\n"},
		[][2]string{{"lbd.toml:8:1", "vrrp[0].auth_pass: is 15 bytes long; VRRPv2 carries 8 (keepalived silently uses the first 8 of a longer one): expected 1 to 8 bytes"},
			{"lbd.toml:16:1", "vrrp[1].auth_pass: is empty; expected 1 to 8 bytes"}}},
	{"bad addresses", map[string]string{"lbd.toml": vinst + "addresses = [\n" +
		"  \"198.18.2.10/24 brd 198.18.2.255\",\n  \"198.18.2.11/24 dev\",\n  \"198.18.2.12 dev eth1:x\",\n  \"nope\",\n  \"127.0.0.1\",\n" +
		"  \"fe80::1%eth0\",\n  \"::ffff:198.18.2.1\",\n  \"198.18.2.13/33\",\n  \"198.18.2.14 dev eth1\",\n  \"198.18.2.14/24\",\n  42,\n]\n"},
		[][2]string{
			{"lbd.toml:6:3", `vrrp[0].addresses[0]: "198.18.2.10/24 brd 198.18.2.255" is not an address; expected "ADDR[/LEN] [dev IFNAME]", such as "198.18.2.10/24" or "2001:2:0:2::10/64 dev eth1" (of keepalived's options, lbd takes dev only)`},
			{"lbd.toml:7:3", `"198.18.2.11/24 dev" is not an address`},
			{"lbd.toml:8:3", `"198.18.2.12 dev eth1:x" names an invalid interface`},
			{"lbd.toml:9:3", `"nope" is not an address`},
			{"lbd.toml:10:3", `"127.0.0.1" is loopback; expected a unicast address`},
			{"lbd.toml:11:3", `"fe80::1%eth0" is not an address`},
			{"lbd.toml:12:3", `"::ffff:198.18.2.1" is an IPv4-mapped IPv6 address; expected the IPv4 address itself`},
			{"lbd.toml:13:3", `"198.18.2.13/33" is not an address`},
			{"lbd.toml:15:3", "vrrp[0].addresses[9]: 198.18.2.14 is listed twice (also addresses[8]); expected each address once"},
			{"lbd.toml:16:3", "vrrp[0].addresses[10]: is an integer; expected a string such as"}}},
	{"families of addresses", map[string]string{"lbd.toml": vinst + "addresses = [\"198.18.2.10/24\", \"2001:2::10/64\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\nversion = 2\naddresses = [\"198.18.3.10/24\", \"2001:2:0:3::10/64\"]\nexcluded_addresses = [\"2001:2:0:4::10/64\"]\n"},
		[][2]string{{"lbd.toml:5:32", "vrrp[0].addresses[1]: 2001:2::10 is IPv6 but the first address is IPv4; an instance advertises one family: expected another instance for IPv6 (or the address in excluded_addresses)"},
			{"lbd.toml:11:32", "vrrp[1].addresses[1]: 2001:2:0:3::10 is IPv6, and VRRPv2 is IPv4 only; expected version = 3"}}},
	{"an address listed and excluded", map[string]string{"lbd.toml": vbase + "excluded_addresses = [\"198.18.2.10/32\"]\n"},
		[][2]string{{"lbd.toml:6:23", "vrrp[0].excluded_addresses[0]: 198.18.2.10 is listed twice (also addresses[0])"}}},
	{"nothing moves", map[string]string{"lbd.toml": vinst + "addresses = []\nservices = []\n"},
		[][2]string{{"lbd.toml:1:1", `vrrp[0]: instance "o" moves nothing; expected addresses = ["ADDR/LEN"], excluded_addresses = [...] or services = [...]`}}},
	{"track_interfaces", map[string]string{"lbd.toml": vbase + "track_interfaces = [\"eth1\", \"eth 2\", \"eth1\"]\n"},
		[][2]string{{"lbd.toml:6:29", `vrrp[0].track_interfaces[1]: "eth 2" is not a valid interface name`},
			{"lbd.toml:6:38", `vrrp[0].track_interfaces[2]: "eth1" is listed twice`}}},
	{"garp", map[string]string{"lbd.toml": vbase + "garp_master_repeat = 0\ngarp_master_delay = \"2h\"\n"},
		[][2]string{{"lbd.toml:6:1", "vrrp[0].garp_master_repeat: 0 is out of range; expected an integer from 1 to 100"},
			{"lbd.toml:7:1", "vrrp[0].garp_master_delay: 2h is out of range"}}},
	{"relative notify", map[string]string{"lbd.toml": vbase + "notify_master = \"notify.sh\"\n"},
		[][2]string{{"lbd.toml:6:1", `vrrp[0].notify_master: "notify.sh" is not an absolute path; expected the program to run, such as "/etc/lbd/notify.sh"`}}},
	{"services", map[string]string{"lbd.toml": "[dataplane]\nnode_cidrs = [\"198.18.0.0/24\"]\n" + vinst[:len(vinst)] + "services = [\n  \"web\",\n  \"nope\",\n  \"np\",\n  \"web\",\n  \"*\",\n  1,\n]\n" +
		vsvc("web", "198.18.100.10", 80) + "[[service]]\nname = \"np\"\nnode_port = 30080\nreal_server = [{address = \"198.18.9.1\", port = 80}]\n"},
		[][2]string{{"lbd.toml:9:3", `vrrp[0].services[1]: no service is named "nope" in the files; expected the name of a [[service]], or services = ["*"] for every service (Consul-defined ones included)`},
			{"lbd.toml:10:3", `vrrp[0].services[2]: service "np" has no VIPs (it is NodePort-like only): nothing of it moves; expected a service with vips`},
			{"lbd.toml:11:3", `vrrp[0].services[3]: "web" is listed twice (also services[0])`},
			{"lbd.toml:12:3", `vrrp[0].services[4]: "*" means every service; expected services = ["*"] alone`},
			{"lbd.toml:13:3", `vrrp[0].services[5]: is an integer; expected a service name`}}},
	{"star then names", map[string]string{"lbd.toml": vinst + "services = [\"*\", \"web\"]\n" + vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:5:18", `vrrp[0].services[1]: "*" means every service`}}},
	{"a service in two instances", map[string]string{"lbd.toml": vinst + "services = [\"web\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\nservices = [\"web\"]\n" + vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:10:13", `vrrp[1].services[0]: service "web" is also carried by instance "o" (at lbd.toml:5:13)`}}},
	{"two stars, and names beside a star", map[string]string{"lbd.toml": vinst + "services = [\"*\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\nservices = [\"*\"]\n" +
		"[[vrrp]]\nname = \"q\"\ninterface = \"eth2\"\nvirtual_router_id = 53\nservices = [\"web\"]\n" + vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:10:1", `vrrp[1].services: instance "o" carries every service already (services = ["*"] at lbd.toml:5:1); expected ["*"] in one instance only`},
			{"lbd.toml:15:1", `vrrp[2].services: instance "o" carries every service (services = ["*"] at lbd.toml:5:1); expected no other instance to name services`}}},
	{"a VIP split between instances", map[string]string{"lbd.toml": vinst + "services = [\"web\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\nservices = [\"tls\"]\n" +
		vsvc("web", "198.18.100.10", 80) + vsvc("tls", "198.18.100.10", 443) + vsvc("alt", "198.18.100.10", 8080)},
		[][2]string{{"lbd.toml:10:13", `vrrp[1].services[0]: service "tls" shares VIP 198.18.100.10 with service "web" (at lbd.toml:11:1), which instance "o" carries; a VIP moves as a whole`},
			{"lbd.toml:5:13", `vrrp[0].services[0]: service "web" shares VIP 198.18.100.10 with service "alt" (at lbd.toml:19:1), which no instance carries`}}},
	{"a carried VIP shared with a service before it", map[string]string{"lbd.toml": vinst + "services = [\"tls\"]\n" +
		vsvc("web", "198.18.100.10", 80) + vsvc("tls", "198.18.100.10", 443)},
		[][2]string{{"lbd.toml:5:13", `vrrp[0].services[0]: service "tls" shares VIP 198.18.100.10 with service "web" (at lbd.toml:6:1), which no instance carries`}}},
	{"addresses across instances and services", map[string]string{"lbd.toml": vbase +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.2.10/24\"]\nexcluded_addresses = [\"198.18.100.10\"]\n" +
		vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:10:14", `vrrp[1].addresses[0]: 198.18.2.10 is also an address of instance "o" (at lbd.toml:5:14); expected each address in one instance`},
			{"lbd.toml:11:23", `vrrp[1].excluded_addresses[0]: 198.18.100.10 is a VIP of service "web"; a service's VIPs move with it, on lbd's link: expected services = ["web"] rather than its VIP here`}}},
	{"an advertised VIP of a service another instance carries", map[string]string{"lbd.toml": vbase + "services = [\"web\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.100.10\"]\n" +
		vsvc("web", "198.18.100.10", 80)},
		[][2]string{{"lbd.toml:11:14", `vrrp[1].addresses[0]: 198.18.100.10 is a VIP of service "web", which this instance does not carry; a service's VIPs move with it, on lbd's link: expected "web" in services too`}}},
	{"duplicate names and routers", map[string]string{"lbd.toml": vbase + vinst + "addresses = [\"198.18.2.11/24\"]\n" +
		"[[vrrp]]\nname = \"o6\"\ninterface = \"eth0\"\nvirtual_router_id = 51\naddresses = [\"2001:2::10/64\"]\n"},
		[][2]string{{"lbd.toml:7:1", `vrrp[1].name: instance name "o" is already used by the instance at lbd.toml:2:1; expected unique names`},
			{"lbd.toml:9:1", `vrrp[1].virtual_router_id: 51 is also the virtual router ID of instance "o" (at lbd.toml:4:1) on eth0 for IPv4; expected one unique per interface and family`}}},
	{"lbd's dummy link", map[string]string{"lbd.toml": "[dataplane]\ninterface = \"lbd1\"\n" +
		"[[vrrp]]\nname = \"o\"\ninterface = \"lbd1\"\nvirtual_router_id = 51\naddresses = [\"198.18.2.10/24\"]\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth0\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.10/24 dev lbd1\"]\n"},
		[][2]string{{"lbd.toml:5:1", `vrrp[0].interface: "lbd1" is lbd's dummy link ([dataplane] interface), which reaches no peer`},
			{"lbd.toml:12:14", `vrrp[1].addresses[0]: is on lbd's dummy link "lbd1" ([dataplane] interface)`}}},
	{"sync groups", map[string]string{"lbd.toml": vbase + "[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.10/24\"]\n" +
		"[[vrrp_sync_group]]\nname = \"g\"\ninstances = [\"o\", \"p\", \"o\", \"ghost\"]\n" + // 11-13
		"[[vrrp_sync_group]]\nname = \"g\"\ninstances = [\"p\"]\n" + // 14-16
		"[[vrrp_sync_group]]\nname = \"bad name\"\n" + // 17-18
		"[[vrrp_sync_group]]\ninstances = [\"o\", \"p\"]\nnotify = \"x\"\nunknown = 1\n"}, // 19-22
		[][2]string{
			{"lbd.toml:13:24", `vrrp_sync_group[0].instances[2]: "o" is listed twice (also instances[0]); expected each instance once`},
			{"lbd.toml:13:29", `vrrp_sync_group[0].instances[3]: no VRRP instance is named "ghost"; expected the name of a [[vrrp]] instance`},
			{"lbd.toml:15:1", `vrrp_sync_group[1].name: sync group name "g" is already used by the group at lbd.toml:12:1`},
			{"lbd.toml:16:1", "vrrp_sync_group[1].instances: lists 1 instance(s); a sync group keeps two or more instances in one state: expected at least two"},
			{"lbd.toml:16:14", `vrrp_sync_group[1].instances[0]: instance "p" is already in sync group "g" (at lbd.toml:13:19); expected each instance in one group at most`},
			{"lbd.toml:17:1", `vrrp_sync_group[2]: sync group "bad name" has no instances; expected instances = ["A", "B"]`},
			{"lbd.toml:18:1", `vrrp_sync_group[2].name: "bad name" is not a valid sync group name`},
			{"lbd.toml:19:1", "vrrp_sync_group[3]: sync group has no name"},
			{"lbd.toml:20:14", `vrrp_sync_group[3].instances[0]: instance "o" is already in sync group "g"`},
			{"lbd.toml:20:19", `vrrp_sync_group[3].instances[1]: instance "p" is already in sync group "g"`},
			{"lbd.toml:21:1", `vrrp_sync_group[3].notify: "x" is not an absolute path`},
			{"lbd.toml:22:1", `vrrp_sync_group[3].unknown: unknown key; accepted in [vrrp_sync_group]: name, instances, notify, notify_master, notify_backup, notify_fault, notify_stop`}}},
	{"vrrp in a drop-in", map[string]string{"lbd.toml": "", "conf.d/a.toml": vbase + "[[vrrp_sync_group]]\nname = \"g\"\n"},
		[][2]string{{"conf.d/a.toml:1:1", "vrrp: global settings are accepted only in the main file"},
			{"conf.d/a.toml:6:1", "vrrp_sync_group: global settings are accepted only in the main file"}}},
}

// TestInvalidVRRP checks each refusal, at its place, and that the two
// ways of reading a file agree on it.
func TestInvalidVRRP(t *testing.T) {
	for _, tt := range vrrpInvalid {
		t.Run(tt.name, func(t *testing.T) {
			got := vrrpErrors(t, tt.files)
			expectErrors(t, got, tt.want)
			for _, g := range got {
				if strings.Contains(g, "s3cret") {
					t.Errorf("an error shows the password: %s", g)
				}
			}
			loadBoth(t, writeConfig(t, tt.files))
		})
	}
}

// vrrpErrors is errorLines with the temporary directory cut from the
// positions that messages give too.
func vrrpErrors(t *testing.T, files map[string]string) []string {
	t.Helper()
	path := writeConfig(t, files)
	_, err := Load(path)
	list, ok := err.(ErrorList)
	if !ok {
		t.Fatalf("error %v is not an ErrorList", err)
	}
	var out []string
	for _, e := range list {
		out = append(out, strings.ReplaceAll(e.Error(), filepath.Dir(path)+"/", ""))
	}
	return out
}

// vrrpEveryKey is a configuration that sets every key of an instance and
// a sync group (instance at line 1, a minimal one at 26, the group at 32),
// with prog as each notify program.
func vrrpEveryKey(prog string) string {
	return `[[vrrp]]
name = "outside"
interface = "eth0"
virtual_router_id = 51
version = 2
priority = 150
advert_interval = "3s"
preempt = true
preempt_delay = "30s"
unicast_peers = ["198.18.2.3"]
unicast_source = "198.18.2.2"
auth_type = "pass"
auth_pass = "s3cret"
addresses = ["198.18.2.10/24", "198.18.3.1/24 dev eth1", "198.18.2.11"]
excluded_addresses = ["2001:2:0:2::10/64 dev eth0", "198.18.4.1/24"]
services = ["web"]
track_interfaces = ["eth1"]
track_syncs = 5
track_services = ["web"]
garp_master_repeat = 3
garp_master_delay = "0s"
notify = "` + prog + `"
notify_master = "` + prog + `"
notify_backup = "` + prog + `"
notify_fault = "` + prog + `"
notify_stop = "` + prog + `"

[[vrrp]]
name = "inside6"
interface = "eth1"
virtual_router_id = 51
addresses = ["2001:2:0:10::1/64"]

[[vrrp_sync_group]]
name = "pair"
instances = ["outside", "inside6"]
notify_fault = "` + prog + `"
` + vsvc("web", "198.18.100.10", 80) + vsvc("dns", "198.18.100.53", 53)
}

// TestVRRPDecode checks every key of an instance and a sync group, and
// the defaults of an instance that sets only what it must.
func TestVRRPDecode(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "notify.sh")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	text := vrrpEveryKey(prog)
	cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": text}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.VRRP) != 2 || len(cfg.VRRPSyncGroups) != 1 {
		t.Fatalf("%d instances, %d groups", len(cfg.VRRP), len(cfg.VRRPSyncGroups))
	}
	o, in, g := cfg.VRRP[0], cfg.VRRP[1], cfg.VRRPSyncGroups[0]
	p := netip.MustParsePrefix
	want := VRRPInstance{
		Name: "outside", Interface: "eth0", VRID: 51, Version: 2, Priority: 150, AdvertInterval: 3 * time.Second,
		Preempt: true, PreemptDelay: 30 * time.Second,
		UnicastPeers: []netip.Addr{netip.MustParseAddr("198.18.2.3")}, UnicastSource: netip.MustParseAddr("198.18.2.2"),
		AuthPass:          "s3cret",
		Addresses:         []VRRPAddress{{p("198.18.2.10/24"), "eth0"}, {p("198.18.3.1/24"), "eth1"}, {p("198.18.2.11/32"), "eth0"}},
		ExcludedAddresses: []VRRPAddress{{p("2001:2:0:2::10/64"), "eth0"}, {p("198.18.4.1/24"), "eth0"}},
		Services:          []string{"web"}, TrackInterfaces: []string{"eth1"}, TrackSyncs: 5, TrackServices: []string{"web"}, GARPRepeat: 3, GARPDelay: 0,
		Notify: Notify{prog, prog, prog, prog, prog},
	}
	if !o.Same(&want) {
		t.Errorf("instance:\n got %+v\nwant %+v", o, want)
	}
	if o.Pos.Line != 1 || in.Pos.Line != 28 || g.Pos.Line != 34 {
		t.Errorf("positions %v %v %v", o.Pos, in.Pos, g.Pos)
	}
	// Only what an instance must say: the rest is lbd's defaults.
	wantIn := VRRPInstance{Name: "inside6", Interface: "eth1", VRID: 51, Version: 3, Priority: 100, AdvertInterval: 200 * time.Millisecond,
		Addresses: []VRRPAddress{{p("2001:2:0:10::1/64"), "eth1"}}, TrackSyncs: 3, GARPRepeat: 5, GARPDelay: 5 * time.Second}
	if !in.Same(&wantIn) || in.Family() != 6 || o.Family() != 4 {
		t.Errorf("defaults:\n got %+v\nwant %+v", in, wantIn)
	}
	if !g.Same(&VRRPSyncGroup{Name: "pair", Instances: []string{"outside", "inside6"}, Notify: Notify{Fault: prog}}) {
		t.Errorf("sync group: %+v", g)
	}
	if c, ok := cfg.VRRPCarrier("web"); c != "outside" || !ok {
		t.Errorf("VRRPCarrier(web) = %q, %v", c, ok)
	}
	if c, ok := cfg.VRRPCarrier("dns"); c != "" || ok {
		t.Errorf("VRRPCarrier(dns) = %q, %v; want none", c, ok)
	}
	// Version 2's default interval is keepalived's, a second.
	cfg, err = Load(writeConfig(t, map[string]string{"lbd.toml": vbase + "version = 2\n"}))
	if err != nil || cfg.VRRP[0].AdvertInterval != time.Second {
		t.Errorf("version 2 default interval: %v, %+v", err, cfg)
	}
}

// TestVRRPAdvertisedVIP: a carried service's VIP may be in the adverts'
// list (keepalived's virtual_ipaddress), with services naming it or "*".
func TestVRRPAdvertisedVIP(t *testing.T) {
	for _, services := range []string{`["web"]`, `["*"]`} {
		text := vinst + "addresses = [\"198.18.2.10/24\", \"198.18.100.10\"]\nservices = " + services + "\n" + vsvc("web", "198.18.100.10", 80)
		cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": text}))
		if err != nil {
			t.Errorf("services = %s: %v", services, err)
			continue
		}
		if got := len(cfg.VRRP[0].Addresses); got != 2 {
			t.Errorf("services = %s: %d addresses, want both", services, got)
		}
	}
}

// TestVRRPCarrier checks which instance carries a service, with ["*"]
// (every service, Consul-defined ones too) and without instances.
func TestVRRPCarrier(t *testing.T) {
	text := vinst + "services = [\"*\"]\n[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.1/24\"]\n" +
		vsvc("web", "198.18.100.10", 80) + vsvc("tls", "198.18.100.10", 443)
	cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": text}))
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.VRRP[0].AllServices || len(cfg.VRRP[0].Services) != 0 {
		t.Errorf("services = [\"*\"]: %+v", cfg.VRRP[0])
	}
	for _, name := range []string{"web", "tls", "from-consul"} {
		if c, ok := cfg.VRRPCarrier(name); c != "o" || !ok {
			t.Errorf("VRRPCarrier(%s) = %q, %v; want o", name, c, ok)
		}
	}
	if c, ok := (&Config{}).VRRPCarrier("web"); ok || c != "" {
		t.Errorf("without instances: %q, %v", c, ok)
	}
}

// TestVRRPSame checks that where an instance is does not count, and what
// it says does.
func TestVRRPSame(t *testing.T) {
	load := func(text string) *Config {
		cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": text}))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const group = "[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.1/24\"]\n" +
		"[[vrrp_sync_group]]\nname = \"g\"\ninstances = [\"o\", \"p\"]\n"
	a, b := load(vbase+group), load("\n# moved\n\n"+vbase+group)
	if !a.VRRP[0].Same(&b.VRRP[0]) || !a.VRRPSyncGroups[0].Same(&b.VRRPSyncGroups[0]) || a.VRRP[0].Pos == b.VRRP[0].Pos {
		t.Errorf("moved instances are not Same")
	}
	c := load(strings.Replace(vbase, "51", "61", 1) + strings.Replace(group, "[\"o\", \"p\"]", "[\"p\", \"o\"]", 1))
	if a.VRRP[0].Same(&c.VRRP[0]) || a.VRRPSyncGroups[0].Same(&c.VRRPSyncGroups[0]) {
		t.Errorf("changed instances are Same")
	}
}

// TestPasswordRedacted checks that printing or encoding an instance never
// shows its password, while string() gives it to the protocol.
func TestPasswordRedacted(t *testing.T) {
	cfg, err := Load(writeConfig(t, map[string]string{"lbd.toml": vbase + "version = 2\nauth_type = \"pass\"\nauth_pass = \"s3cret\"\n"}))
	if err != nil {
		t.Fatal(err)
	}
	v := cfg.VRRP[0]
	if string(v.AuthPass) != "s3cret" {
		t.Fatalf("AuthPass = %q", string(v.AuthPass))
	}
	j, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(v), fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v), fmt.Sprintf("%s %q %v", v.AuthPass, v.AuthPass, cfg), string(j)} {
		if strings.Contains(s, "s3cret") || !strings.Contains(s, "********") {
			t.Errorf("password shown, or not marked: %.400s", s)
		}
	}
	if Password("").String() != "" {
		t.Errorf("no password prints as %q", Password("").String())
	}
}

// TestVRRPNotifyFiles checks that Load checks the notify programs as it
// checks exec checks' programs, at the key that names them.
func TestVRRPNotifyFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, noexec, missing := write("good", 0o755), write("noexec", 0o644), filepath.Join(dir, "missing")
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o700); err != nil {
		t.Fatal(err)
	}
	text := vbase + "notify = %q\nnotify_master = %q\nnotify_backup = %q\nnotify_fault = %q\nnotify_stop = %q\n" +
		"[[vrrp]]\nname = \"p\"\ninterface = \"eth1\"\nvirtual_router_id = 52\naddresses = [\"198.18.3.1/24\"]\n" +
		"[[vrrp_sync_group]]\nname = \"g\"\ninstances = [\"o\", \"p\"]\nnotify = %q\nnotify_stop = %q\n"
	got := errorLines(t, map[string]string{"lbd.toml": fmt.Sprintf(text, good, noexec, missing, good, dir, fifo, noexec)})
	expectErrors(t, got, [][2]string{
		{"lbd.toml:7:1", "vrrp[0].notify_master: " + noexec + " is not executable (mode -rw-r--r--); expected a program lbd may run"},
		{"lbd.toml:8:1", "vrrp[0].notify_backup: stat " + missing + ": no such file or directory"},
		{"lbd.toml:10:1", "vrrp[0].notify_stop: " + dir + " is not a regular file (a directory); expected the program lbd runs on a VRRP state change"},
		{"lbd.toml:19:1", "vrrp_sync_group[0].notify: " + fifo + " is not a regular file (a FIFO)"},
		// noexec again: reported once, at its first key.
	})
	if _, err := Load(writeConfig(t, map[string]string{"lbd.toml": fmt.Sprintf(text, good, good, good, good, good, good, good)})); err != nil {
		t.Errorf("good programs refused: %v", err)
	}
	// A configuration made in code is checked too, at the main file.
	cfg := &Config{Files: []string{"lbd.toml"}, VRRP: []VRRPInstance{{Notify: Notify{Stop: missing}}}}
	if err := cfg.CheckFiles(); err == nil || err.Error() != "lbd.toml: vrrp[0].notify_stop: stat "+missing+": no such file or directory" {
		t.Errorf("CheckFiles = %v", err)
	}
}

// TestExamplePair checks the shipped pair of boxes: each file loads as
// check-config loads it, the two ways of reading agree, and the boxes
// differ in priority only, as a pair must (keepalived compares the rest).
func TestExamplePair(t *testing.T) {
	var boxes []*Config
	for _, f := range []string{"../examples/pair/lbd-a.toml", "../examples/pair/lbd-b.toml"} {
		cfg, err := Load(f)
		if err != nil {
			t.Fatalf("%s does not load:\n%v", f, err)
		}
		loadBoth(t, f)
		boxes = append(boxes, cfg)
	}
	a, b := boxes[0], boxes[1]
	if len(a.Files) != 1 || len(a.Services) != 3 || len(a.VRRP) != 2 || len(a.VRRPSyncGroups) != 1 {
		t.Fatalf("files %v, %d services, %d instances, %d groups", a.Files, len(a.Services), len(a.VRRP), len(a.VRRPSyncGroups))
	}
	for i := range a.VRRP {
		va, vb := a.VRRP[i], b.VRRP[i]
		if va.Priority != 150 || vb.Priority != 100 {
			t.Errorf("%s: priorities %d, %d; want 150 on box A, 100 on box B", va.Name, va.Priority, vb.Priority)
		}
		vb.Priority = va.Priority
		if !va.Same(&vb) {
			t.Errorf("%s differs between the boxes beyond priority:\n%+v\n%+v", va.Name, va, vb)
		}
	}
	if !a.VRRPSyncGroups[0].Same(&b.VRRPSyncGroups[0]) {
		t.Errorf("sync groups differ")
	}
	o := a.VRRP[0]
	inside := VRRPAddress{netip.MustParsePrefix("198.19.10.1/24"), "eth1"}
	if o.Version != 3 || o.Preempt || !slices.Contains(o.Addresses, inside) || a.VRRP[1].Family() != 6 {
		t.Errorf("outside4: %+v", o)
	}
	for name, want := range map[string]string{"web": "outside4", "dns": "outside4", "web6": "outside6"} {
		if c, ok := a.VRRPCarrier(name); c != want || !ok {
			t.Errorf("VRRPCarrier(%s) = %q, %v; want %s", name, c, ok, want)
		}
	}
}
