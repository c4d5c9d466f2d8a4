package importer

import (
	"testing"
)

func TestImportVRRP(t *testing.T) {
	const vs = "virtual_server 192.0.2.10 80 {\n real_server 10.0.0.1 80 {\n }\n}\n"
	tests := []importCase{
		{"v2 pair with authentication, defaults written",
			"vrrp_instance VI_1 {\n state MASTER\n interface eth0\n virtual_router_id 51\n priority 150\n authentication {\n  auth_type PASS\n  auth_pass 123456789\n }\n virtual_ipaddress {\n  198.51.100.1/24 dev eth1\n  198.51.100.2\n }\n}\n",
			[]string{"[[vrrp]]\nname = \"VI_1\"\ninterface = \"eth0\"\nvirtual_router_id = 51\nversion = 2\npriority = 150\nadvert_interval = \"1s\"\npreempt = true\nauth_type = \"pass\"\nauth_pass = \"12345678\"",
				`addresses = ["198.51.100.1/24 dev eth1", "198.51.100.2/32"]`},
			nil, []want{{2, Differs, "backup"}, {8, Differs, "first 8 bytes"}}, true},
		{"v3, unicast, nopreempt, tracking",
			"vrrp_instance B {\n interface eth0\n version 3\n virtual_router_id 9\n advert_int 0.5\n nopreempt\n unicast_src_ip 2001:db8::a\n unicast_peer {\n  2001:db8::b\n }\n track_interface {\n  eth1\n  eth2 weight 10\n }\n track_script {\n  chk\n }\n virtual_ipaddress {\n  2001:db8::1/64\n }\n}\n",
			[]string{"version = 3", `advert_interval = "500ms"`, "preempt = false", `unicast_peers = ["2001:db8::b"]`, `unicast_source = "2001:db8::a"`, `track_interfaces = ["eth1", "eth2"]`},
			nil, []want{{13, NotMapped, "weight"}, {15, NotMapped, "scripts"}}, false},
		{"a service VIP moves through services, and the adverts keep it",
			vs + "vrrp_instance V {\n interface eth0\n virtual_router_id 1\n virtual_ipaddress {\n  192.0.2.10\n  198.51.100.7/24\n }\n}\n",
			[]string{`services = ["vs-192.0.2.10-80-tcp"]`, `addresses = ["192.0.2.10/32", "198.51.100.7/24"]`, "forward = \"nat\"\nannounce = \"arp\"\nannounce_interface = \"eth0\""}, nil,
			[]want{{9, Differs, "adverts carry it"}}, true},
		{"an excluded service VIP moves through services only",
			vs + "vrrp_instance V {\n interface eth0\n virtual_router_id 1\n virtual_ipaddress {\n  198.51.100.7/24\n }\n virtual_ipaddress_excluded {\n  192.0.2.10\n }\n}\n",
			[]string{`services = ["vs-192.0.2.10-80-tcp"]`, `addresses = ["198.51.100.7/24"]`, "announce = \"arp\"\nannounce_interface = \"eth0\""}, []string{"excluded_addresses"},
			[]want{{12, Differs, "through `services`"}}, true},
		{"sync group and notify",
			"vrrp_sync_group G {\n group {\n  A\n  B\n  C\n }\n notify_master \"/usr/local/bin/ok x\"\n notify /usr/local/bin/ok\n}\n" +
				"vrrp_instance A {\n interface eth0\n virtual_router_id 1\n virtual_ipaddress {\n  198.51.100.1\n }\n}\n" +
				"vrrp_instance B {\n interface eth1\n virtual_router_id 2\n virtual_ipaddress {\n  198.51.100.2\n }\n notify_backup /opt/none\n}\n",
			[]string{"[[vrrp_sync_group]]\nname = \"group-G\"\ninstances = [\"A\", \"B\"]\nnotify = \"/usr/local/bin/ok\""}, []string{"notify_backup"},
			[]want{{5, NotMapped, "no vrrp_instance"}, {7, NotMapped, "without arguments"}, {23, NotMapped, "not an executable file"}}, false},
		{"ah, priority 255, v2 fractional advert",
			"vrrp_instance V {\n interface eth0\n virtual_router_id 1\n priority 255\n advert_int 1.5\n authentication {\n  auth_type AH\n }\n virtual_ipaddress {\n  198.51.100.1\n }\n}\n",
			[]string{"priority = 254", `advert_interval = "2s"`}, []string{"auth_type"},
			[]want{{4, Differs, "254"}, {5, Differs, "whole seconds"}, {7, NotMapped, "AH"}}, false},
	}
	runImportCases(t, tests)
}
