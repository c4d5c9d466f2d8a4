package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testPEM returns a self-signed certificate and its key, PEM-encoded.
func testPEM(t *testing.T) (cert, key []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lbd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestCheckFiles checks that Load (and so check-config and a reload)
// refuses a configuration whose referenced files are missing, not regular
// or do not hold what they should, at the key that names them.
func TestCheckFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key := testPEM(t)
	_, otherKey := testPEM(t)
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := map[string]string{
		"token": write("token", []byte("  s3cret\n"), 0o600), "ca": write("ca.pem", cert, 0o644),
		"cert": write("cert.pem", cert, 0o644), "key": write("key.pem", key, 0o600),
		"prog": write("check", []byte("#!/bin/sh\n"), 0o755),
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := map[string]string{
		"empty": write("empty", []byte(" \n"), 0o600), "two lines": write("two", []byte("a\nb\n"), 0o600),
		"not pem": write("notpem", []byte("hello"), 0o644), "other key": write("other.pem", otherKey, 0o600),
		"not executable": write("noexec", []byte("#!/bin/sh\n"), 0o644), "missing": filepath.Join(dir, "missing"),
		"huge": write("huge", []byte(strings.Repeat("x", maxRefSize+1)), 0o600),
	}
	text := func(token, ca, cert, key, prog string) string {
		return "[consul]\ntoken_file = \"" + token + "\"\n[consul.tls]\nca_file = \"" + ca + "\"\ncert_file = \"" + cert + "\"\nkey_file = \"" + key + "\"\n" +
			svc + "health_check = { type = \"exec\", command = [\"" + prog + "\"] }\n"
	}
	if _, err := Load(writeConfig(t, map[string]string{"lbd.toml": text(good["token"], good["ca"], good["cert"], good["key"], good["prog"])})); err != nil {
		t.Fatalf("good files refused: %v", err)
	}
	tests := []struct {
		name                       string
		token, ca, cert, key, prog string
		want                       [][2]string
	}{
		{"missing", bad["missing"], bad["missing"], bad["missing"], good["key"], bad["missing"], [][2]string{
			{"lbd.toml:2:1", "consul.token_file: stat " + bad["missing"] + ": no such file or directory"},
			{"lbd.toml:4:1", "consul.tls.ca_file: stat " + bad["missing"] + ": no such file or directory"},
			{"lbd.toml:5:1", "consul.tls.cert_file: stat " + bad["missing"] + ": no such file or directory"},
			{"lbd.toml:12:", "service[0].health_check.command: stat " + bad["missing"] + ": no such file or directory"}}},
		{"fifos", fifo, fifo, good["cert"], fifo, dir, [][2]string{
			{"lbd.toml:2:1", "consul.token_file: " + fifo + ": not a regular file (a FIFO); lbd reads only regular files"},
			{"lbd.toml:4:1", "consul.tls.ca_file: " + fifo + ": not a regular file (a FIFO)"},
			{"lbd.toml:6:1", "consul.tls.key_file: " + fifo + ": not a regular file (a FIFO)"},
			{"lbd.toml:12:", "service[0].health_check.command: " + dir + " is not a regular file (a directory)"}}},
		{"wrong content", bad["empty"], bad["not pem"], good["cert"], bad["other key"], bad["not executable"], [][2]string{
			{"lbd.toml:2:1", "consul.token_file: " + bad["empty"] + " is empty; expected the Consul ACL token"},
			{"lbd.toml:4:1", "consul.tls.ca_file: " + bad["not pem"] + " holds no PEM certificate"},
			{"lbd.toml:5:1", "consul.tls.cert_file: " + good["cert"] + " and key_file " + bad["other key"] + " are not a key pair: tls: private key does not match public key"},
			{"lbd.toml:12:", "service[0].health_check.command: " + bad["not executable"] + " is not executable (mode -rw-r--r--)"}}},
		{"two lines, huge", bad["two lines"], bad["huge"], good["cert"], good["key"], good["prog"], [][2]string{
			{"lbd.toml:2:1", "consul.token_file: " + bad["two lines"] + " holds more than one line"},
			{"lbd.toml:4:1", "consul.tls.ca_file: " + bad["huge"] + ": larger than 1 MiB, the most lbd reads of such a file"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := errorLines(t, map[string]string{"lbd.toml": text(tt.token, tt.ca, tt.cert, tt.key, tt.prog)})
			expectErrors(t, got, tt.want)
		})
	}
}

// TestCheckFilesOfABuiltConfig checks CheckFiles on a configuration made
// in code: without positions, problems are placed at the main file.
func TestCheckFilesOfABuiltConfig(t *testing.T) {
	cfg := &Config{Files: []string{"lbd.toml"}, Consul: Consul{TokenFile: "/nonexistent/token"}}
	err := cfg.CheckFiles()
	if err == nil || err.Error() != "lbd.toml: consul.token_file: stat /nonexistent/token: no such file or directory" {
		t.Errorf("CheckFiles = %v", err)
	}
	if err := (&Config{}).CheckFiles(); err != nil {
		t.Errorf("CheckFiles of an empty configuration = %v", err)
	}
}

// TestRealServerAddresses checks the addresses a real server or sorry
// server may not have, and [consul.virtual_services] real_server_networks.
func TestRealServerAddresses(t *testing.T) {
	const other = "[[service]]\nname = \"other\"\nvips = [\"192.0.2.20\"]\nport = 443\n"
	tests := []invalidConfig{
		{"broadcast", map[string]string{"lbd.toml": svc + "real_server = [{address = \"255.255.255.255\"}]\n"},
			[][2]string{{"lbd.toml:6:17", "255.255.255.255 is not a routable unicast address (it is broadcast;"}}},
		{"this network", map[string]string{"lbd.toml": svc + "real_server = [{address = \"0.1.2.3\"}]\n"},
			[][2]string{{"lbd.toml:6:17", `0.1.2.3 is not a routable unicast address (it is "this network" (0.0.0.0/8);`}}},
		{"mapped loopback", map[string]string{"lbd.toml": svc + "real_server = [{address = \"::ffff:127.0.0.1\"}]\n"},
			[][2]string{{"lbd.toml:6:17", "127.0.0.1 is not a routable unicast address (it is loopback;"}}},
		{"another service's VIP", map[string]string{"lbd.toml": other, "conf.d/a.toml": svc + "real_server = [{address = \"192.0.2.20\"}]\n"},
			[][2]string{{"conf.d/a.toml:6:16", `service[0].real_server[0].address: 192.0.2.20 is a VIP of service "other"`}}},
		{"sorry server a VIP", map[string]string{"lbd.toml": other + svc + "sorry_server = \"192.0.2.20:80\"\n"},
			[][2]string{{"lbd.toml:10:1", `service[1].sorry_server: 192.0.2.20 is a VIP of service "other"`}}},
		{"sorry server loopback", map[string]string{"lbd.toml": svc + "sorry_server = \"127.0.0.1:80\"\n"},
			[][2]string{{"lbd.toml:6:1", "127.0.0.1 is not a routable unicast address (it is loopback"}}},
		{"no real_server_networks", map[string]string{"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = [\"198.51.100.0/24\"]\n"},
			[][2]string{{"lbd.toml:1:1", `consul.virtual_services: has no real_server_networks; expected real_server_networks = ["10.0.0.0/8"] (or similar)`}}},
		{"real_server_networks host bits, empty pools", map[string]string{"lbd.toml": "[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = []\nreal_server_networks = [\"10.1.2.3/8\"]\n"},
			[][2]string{{"lbd.toml:3:1", "consul.virtual_services.vip_pools: is empty; expected at least one CIDR"},
				{"lbd.toml:4:25", `real_server_networks[0]: "10.1.2.3/8" has host bits set; expected the network address, "10.0.0.0/8"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { expectErrors(t, errorLines(t, tt.files), tt.want) })
	}
	cfg, err := Parse([]string{"lbd.toml"}, [][]byte{[]byte("[consul.virtual_services]\ntag = \"lbd\"\nvip_pools = [\"198.51.100.0/24\"]\nreal_server_networks = [\"10.0.0.0/8\", \"2001:db8:1::/48\"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")}
	if got := cfg.Consul.VirtualServices.RealServerNetworks; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("RealServerNetworks = %v", got)
	}
}
