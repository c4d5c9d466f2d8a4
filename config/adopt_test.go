package config

import (
	"strings"
	"testing"
)

// adopt is a file service's explicit request to take over foreign IPVS
// virtual servers; it decodes the same both ways and counts as a change.
func TestAdoptKey(t *testing.T) {
	const svc = "[[service]]\nname = \"web\"\nvips = [\"192.0.2.10\"]\nport = 80\n"
	tests := []struct {
		text    string
		want    bool
		wantErr string
	}{
		{svc, false, ""},
		{svc + "adopt = true\n", true, ""},
		{svc + "adopt = \"yes\"\n", false, "adopt"},
	}
	for _, tt := range tests {
		fast, generic, fastErr, genericErr := parseBoth(t, []string{"lbd.toml"}, [][]byte{[]byte(tt.text)})
		sameOutcome(t, tt.text, fast, generic, fastErr, genericErr)
		if tt.wantErr != "" {
			if fastErr == nil || !strings.Contains(fastErr.Error(), tt.wantErr) {
				t.Errorf("%q: error %v; want one about %s", tt.text, fastErr, tt.wantErr)
			}
			continue
		}
		if fastErr != nil || fast.Services[0].Adopt != tt.want {
			t.Errorf("%q: adopt %v, %v; want %v", tt.text, fast.Services[0].Adopt, fastErr, tt.want)
		}
	}
	old, _ := Parse([]string{"lbd.toml"}, [][]byte{[]byte(svc)})
	cur, _ := Parse([]string{"lbd.toml"}, [][]byte{[]byte(svc + "adopt = true\n")})
	if _, _, changed := Changes(old, cur); len(changed) != 1 {
		t.Errorf("setting adopt changed %v; want web", changed)
	}
}
