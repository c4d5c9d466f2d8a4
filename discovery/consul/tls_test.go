package consul

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/discovery/consul/internal/consultest"
)

// testPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, each signed by the CA, as PEM files in dir.
func testPKI(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lbd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (cert, key string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost", "server.dc1.consul"}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	clientCert, clientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	return ca, serverCert, serverKey, clientCert, clientKey
}

// TestTLSAgent follows a real agent over HTTPS that requires a client
// certificate: with lbd's CA and client certificate it works; without the
// client certificate the agent refuses and the Watcher reports it.
func TestTLSAgent(t *testing.T) {
	dir := t.TempDir()
	ca, sc, sk, cc, ck := testPKI(t, dir)
	agent := consultest.Start(t, consultest.Options{HTTPS: true, HCL: `
tls {
  defaults {
    ca_file = "` + ca + `"
    cert_file = "` + sc + `"
    key_file = "` + sk + `"
    verify_incoming = true
  }
}`})
	register(t, agent.Client(""), reg{ID: "web-1", Name: "web", Address: "10.0.0.1", Port: 80})
	q := Query{Service: "web"}

	cfg := config.Consul{Enabled: true, Address: agent.HTTPSAddr(), Scheme: "https",
		TLS: config.ConsulTLS{CAFile: ca, CertFile: cc, KeyFile: ck}}
	c, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	w := New(testOptions(t, c, nil))
	w.SetQueries([]Query{q})
	run(t, w)
	waitFor(t, w, "web over HTTPS with a client certificate", func(s Snapshot) bool {
		return s.Connected && has(s, q.Key(), "[web-1@10.0.0.1:80(passing)]")
	})

	// The CA alone: the agent wants a client certificate.
	cfg.TLS.CertFile, cfg.TLS.KeyFile = "", ""
	c2, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	w2 := New(testOptions(t, c2, nil))
	w2.SetQueries([]Query{q})
	run(t, w2)
	deadline := time.Now().Add(patience)
	for w2.Status().LastError == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if st := w2.Status(); st.Connected || !strings.Contains(strings.ToLower(st.LastError), "tls") && !strings.Contains(st.LastError, "certificate") {
		t.Errorf("without a client certificate: connected %v, last error %q; want a TLS failure reported", st.Connected, st.LastError)
	}
}
