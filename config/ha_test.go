package config

import (
	"fmt"
	"strings"
	"testing"
)

const syncBase = "[ha.ipvs_sync]\ninterface = \"eth1\"\npeer = \"198.18.3.2\"\n"

func TestInvalidHA(t *testing.T) {
	for _, tt := range []invalidConfig{
		{"required keys missing", map[string]string{"lbd.toml": "[ha.ipvs_sync]\n"},
			[][2]string{{"lbd.toml:1:1", "ha.ipvs_sync: has no interface"}, {"lbd.toml:1:1", "ha.ipvs_sync: has no peer"}}},
		{"unicast group, multicast peer", map[string]string{"lbd.toml": "[ha.ipvs_sync]\ninterface = \"eth1\"\npeer = \"224.0.0.5\"\ngroup = \"198.18.3.9\"\n"},
			[][2]string{{"lbd.toml:3:1", "ha.ipvs_sync.peer: 224.0.0.5 is not a unicast address"},
				{"lbd.toml:4:1", "ha.ipvs_sync.group: 198.18.3.9 is not a multicast address"}}},
		{"families differ", map[string]string{"lbd.toml": syncBase + "group = \"ff02::8:81\"\n"},
			[][2]string{{"lbd.toml:3:1", "ha.ipvs_sync.peer: 198.18.3.2 is not of the group's family (ff02::8:81)"}}},
		{"ranges", map[string]string{"lbd.toml": syncBase + "sync_id = 256\nport = 0\nttl = 0\nmax_packet_length = 100\n"},
			[][2]string{{"lbd.toml:4:1", "sync_id: 256 is out of range"}, {"lbd.toml:5:1", "port: 0 is out of range"},
				{"lbd.toml:6:1", "ttl: 0 is out of range"}, {"lbd.toml:7:1", "max_packet_length: 100 is out of range"}}},
		{"unknown key", map[string]string{"lbd.toml": syncBase + "lvs_sync_daemon = 1\n"},
			[][2]string{{"lbd.toml:4:1", "ha.ipvs_sync.lvs_sync_daemon: unknown key"}}},
		{"dummy link and a VIP as peer", map[string]string{"lbd.toml": "[ha.ipvs_sync]\ninterface = \"lbd0\"\npeer = \"198.18.100.1\"\n" +
			vsvc("web", "198.18.100.1", 80) + "real_server = [{ address = \"198.18.3.11\" }]\n"},
			[][2]string{{"lbd.toml:1:1", `ha.ipvs_sync.interface: "lbd0" is lbd's dummy link`}, {"lbd.toml:1:1", "ha.ipvs_sync.peer: 198.18.100.1 is a VIP of service web"}}},
		{"in a drop-in", map[string]string{"lbd.toml": "", "conf.d/x.toml": syncBase},
			[][2]string{{"conf.d/x.toml:1:1", "ha: global settings are accepted only in the main file"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, vrrpErrors(t, tt.files), tt.want)
			loadBoth(t, writeConfig(t, tt.files))
		})
	}
}

func TestHADecode(t *testing.T) {
	cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(syncBase + "sync_id = 51\ngroup = \"224.0.0.82\"\nport = 9000\nttl = 2\nmax_packet_length = 1400\n")})
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.IPVSSync
	if got := fmt.Sprintf("%v %s %d %s %s %d %d %d %d", s.Enabled, s.Interface, s.SyncID, s.Peer, s.SyncGroup(), s.SyncPort(), s.TTL, s.MaxPacketLength, s.Pos.Line); got != "true eth1 51 198.18.3.2 224.0.0.82 9000 2 1400 1" {
		t.Errorf("decoded %s", got)
	}
	cfg, err = Parse([]string{"lbd.toml"}, [][]byte{[]byte(syncBase)})
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.IPVSSync; s.SyncGroup().String() != "224.0.0.81" || s.SyncPort() != 8848 || s.SyncID != 0 {
		t.Errorf("defaults: %+v", s)
	}
}

// ctBase is [ha.conntrackd] (lines 1-2) ahead of vbase, whose address
// 198.18.2.10 is the floating address to SNAT to.
const ctBase = "[ha.conntrackd]\nsnat_address = [\"198.18.2.10\"]\n"

// ctProg names a program that exists (conntrackd may not be installed).
const ctProg = "program = \"/bin/true\"\n"

func TestInvalidConntrackd(t *testing.T) {
	for _, tt := range []invalidConfig{
		{"nothing to take the link from", map[string]string{"lbd.toml": ctBase + ctProg + vbase},
			[][2]string{{"lbd.toml:1:1", "ha.conntrackd: has no interface and peer, and there is no [ha.ipvs_sync]"}}},
		{"no snat address, no pair", map[string]string{"lbd.toml": "[ha.conntrackd]\ninterface = \"eth1\"\npeer = \"198.18.3.2\"\n" + ctProg},
			[][2]string{{"lbd.toml:1:1", "ha.conntrackd: has no snat_address"}, {"lbd.toml:1:1", "ha.conntrackd: is set without [[vrrp]] instances"}}},
		{"not floating, two of a family", map[string]string{"lbd.toml": "[ha.conntrackd]\nsnat_address = [\"198.18.2.10\", \"198.18.2.11\"]\n" + ctProg + syncBase + vbase},
			[][2]string{{"lbd.toml:2:32", "ha.conntrackd.snat_address[1]: 198.18.2.11 is a second address of its family"},
				{"lbd.toml:2:32", "ha.conntrackd.snat_address[1]: 198.18.2.11 is not an address of a [[vrrp]] instance"}}},
		{"program missing", map[string]string{"lbd.toml": ctBase + "program = \"/nonexistent/conntrackd\"\n" + syncBase + vbase},
			[][2]string{{"lbd.toml:1:1", "ha.conntrackd.program: stat /nonexistent/conntrackd: no such file or directory"}}},
		{"bad values", map[string]string{"lbd.toml": ctBase + "peer = \"224.0.0.1\"\naddress = \"2001:2::1\"\nport = 0\nprogram = \"conntrackd\"\ninterface = \"a b\"\n" + syncBase + vbase},
			[][2]string{{"lbd.toml:3:1", "ha.conntrackd.peer: 224.0.0.1 is not a unicast address"},
				{"lbd.toml:5:1", "port: 0 is out of range"}, {"lbd.toml:6:1", `ha.conntrackd.program: "conntrackd" is not an absolute path`},
				{"lbd.toml:7:1", `ha.conntrackd.interface: "a b" is not a valid interface name`},
				{"lbd.toml:1:1", "ha.conntrackd.address: 2001:2::1 is not of the peer's family (224.0.0.1)"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			expectErrors(t, vrrpErrors(t, tt.files), tt.want)
			loadBoth(t, writeConfig(t, tt.files))
		})
	}
}

func TestConntrackdDecode(t *testing.T) {
	cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte(ctBase + syncBase + strings.Replace(vbase, "198.18.2.10/24", "198.18.2.10/24 dev eth1", 1))})
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Conntrackd
	if got := fmt.Sprintf("%v %s %s %v %d %s %v", c.Enabled, c.Interface, c.Peer, c.Address.IsValid(), c.Port, c.Program, c.SNATAddresses); got != "true eth1 198.18.3.2 false 3780 /usr/sbin/conntrackd [198.18.2.10]" {
		t.Errorf("decoded %s", got)
	}
	if f, ok := cfg.FloatingAddress(c.SNATAddresses[0]); !ok || f.Interface != "eth1" {
		t.Errorf("FloatingAddress = %v, %v; want the address on eth1", f, ok)
	}
}
