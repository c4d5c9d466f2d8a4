package consul

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lbdproject/lbd/config"
)

func TestNewClient(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const secret = "6c1d0c4e-5b5e-4d1f-9d8b-7b1c2a9f0e11"
	tokenFile := write("token", "\n  "+secret+" \n")
	emptyFile := write("empty", " \n")
	tests := []struct {
		name      string
		cfg       config.Consul
		wantErr   string // substring; "" for success
		wantToken string
		wantBase  string
	}{
		{"defaults", config.Consul{}, "", "", "http://127.0.0.1:8500"},
		{"address and https", config.Consul{Address: "consul.example:8501", Scheme: "https"}, "", "", "https://consul.example:8501"},
		{"token trimmed", config.Consul{TokenFile: tokenFile}, "", secret, "http://127.0.0.1:8500"},
		{"empty token file", config.Consul{TokenFile: emptyFile}, "token file " + emptyFile + " is empty", "", ""},
		{"missing token file", config.Consul{TokenFile: filepath.Join(dir, "nope")}, "reading token file", "", ""},
		{"unknown scheme", config.Consul{Scheme: "ftp"}, `scheme "ftp"`, "", ""},
		{"URL as address", config.Consul{Address: "https://consul:8501"}, "want host:port", "", ""},
		{"missing CA", config.Consul{Scheme: "https", TLS: config.ConsulTLS{CAFile: filepath.Join(dir, "ca.pem")}}, "TLS settings", "", ""},
		{"certificate without key", config.Consul{Scheme: "https", TLS: config.ConsulTLS{CertFile: tokenFile}}, "TLS settings", "", ""},
		{"key pair that does not parse", config.Consul{Scheme: "https", TLS: config.ConsulTLS{CertFile: tokenFile, KeyFile: tokenFile}}, "TLS settings", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("CONSUL_HTTP_TOKEN", "")
			t.Setenv("CONSUL_HTTP_TOKEN_FILE", "")
			c, err := NewClient(tt.cfg)
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows the token: %v", err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.token != tt.wantToken {
				t.Errorf("token = %q, want %q", c.token, tt.wantToken)
			}
			if got := c.base.String(); got != tt.wantBase {
				t.Errorf("agent = %s, want %s", got, tt.wantBase)
			}
		})
	}
}

func TestNewClientServerNameAndInsecure(t *testing.T) {
	c, err := NewClient(config.Consul{Scheme: "https", TLS: config.ConsulTLS{ServerName: "consul.internal", InsecureSkipVerify: true}})
	if err != nil {
		t.Fatal(err)
	}
	tls := c.hc.Transport.(capTransport).rt.(*http.Transport).TLSClientConfig
	if tls.ServerName != "consul.internal" || !tls.InsecureSkipVerify {
		t.Errorf("TLS server name %q, insecure %v; want consul.internal, true", tls.ServerName, tls.InsecureSkipVerify)
	}
}
