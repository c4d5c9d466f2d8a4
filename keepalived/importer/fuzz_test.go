package importer

import (
	"testing"
	"testing/fstest"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/keepalived/conf"
)

// FuzzImport: whatever the parser accepts, the import neither panics nor
// writes a configuration lbd refuses.
func FuzzImport(f *testing.F) {
	for _, seed := range []string{
		"virtual_server 192.0.2.1 80 {\n lb_kind TUN type gue port 1\n quorum 3\n real_server 10.0.0.1 80 {\n  weight 3\n  HTTP_GET {\n   url {\n    path /\n   }\n  }\n }\n}\n",
		"virtual_server_group G {\n 192.0.2.1-3 80\n fwmark 4\n}\nvirtual_server group G {\n sorry_server 10.0.0.9 81\n}\n",
		"vrrp_instance V {\n interface eth0\n virtual_router_id 1\n virtual_ipaddress {\n  192.0.2.1\n }\n}\nvirtual_server 192.0.2.1 80 {\n}\n",
		"global_defs {\n lvs_timeouts tcp 1 udp 2\n lvs_sync_daemon eth0 V id 1 port 99\n}\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		fs := conf.MapFS(fstest.MapFS{"k.conf": {Data: []byte(text), Mode: 0o644}})
		cfg, err := conf.Parse("/k.conf", conf.Options{ConfigID: "f", FS: fs})
		if err != nil {
			return
		}
		res, err := Import(cfg, Options{Executable: func(string) bool { return true }})
		if err != nil {
			t.Fatalf("import: %v", err)
		}
		if _, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(res.TOML())}); err != nil {
			t.Fatalf("output does not validate: %v\n%s", err, res.TOML())
		}
	})
}
