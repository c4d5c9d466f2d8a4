package ownership

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecover(t *testing.T) {
	vip := netip.MustParseAddr("192.0.2.10")
	listed := func() ([]netip.Addr, error) { return []netip.Addr{vip}, nil }
	tests := []struct {
		name      string
		content   *string // nil: no file
		vips      func() ([]netip.Addr, error)
		recovered bool
		cause     string
		wantErr   bool
	}{
		{name: "missing", vips: listed},
		{name: "readable", content: ptr(`{"version":1,"ipvs":["192.0.2.10:80/tcp"]}`), vips: listed},
		{name: "truncated", content: ptr(`{"version":1,"ipvs":["192.0.2.10:80/t`), vips: listed, recovered: true, cause: "unexpected end of JSON input"},
		{name: "empty", content: ptr(``), vips: listed, recovered: true, cause: "unexpected end of JSON input"},
		{name: "unknown version", content: ptr(`{"version":2,"ipvs":[]}`), vips: listed, recovered: true, cause: "format version 2; this lbd reads version 1"},
		{name: "bad key", content: ptr(`{"version":1,"ipvs":["nope"]}`), vips: listed, recovered: true, cause: "nope"},
		{name: "VIPs unknown", content: ptr(`{`), vips: func() ([]netip.Addr, error) { return nil, errors.New("netlink: busy") }, recovered: true, cause: "unexpected end", wantErr: true},
	}
	now := time.Date(2026, 11, 24, 15, 4, 5, 0, time.UTC)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := FileLedger{Path: filepath.Join(t.TempDir(), "ipvs-owned.json")}
			if tt.content != nil {
				if err := os.WriteFile(l.Path, []byte(*tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rec, err := l.Recover(tt.vips, now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Recover: %v; want error %v", err, tt.wantErr)
			}
			if (rec != nil) != tt.recovered {
				t.Fatalf("Recover = %+v; want a recovery %v", rec, tt.recovered)
			}
			if rec == nil {
				return
			}
			if !strings.Contains(rec.Cause.Error(), tt.cause) {
				t.Errorf("cause %q; want it to say %q", rec.Cause, tt.cause)
			}
			if rec.Aside != l.Path+".unreadable-20261124T150405Z" {
				t.Errorf("set aside as %s", rec.Aside)
			}
			if b, err := os.ReadFile(rec.Aside); err != nil || string(b) != *tt.content {
				t.Errorf("the file set aside holds %q, %v; want what was there", b, err)
			}
			// The new ledger starts empty and can be written.
			if owned, err := l.Owned(); err != nil || len(owned) != 0 {
				t.Errorf("after recovery: %v, %v; want an empty ledger", owned, err)
			}
			if !tt.wantErr && !rec.VIPs[vip] {
				t.Errorf("VIPs %v; want the interface's", rec.VIPs)
			}
		})
	}
}

func TestOwnedRefusesWhatIsNotALedger(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"version":1,"ipvs":[`+strings.Repeat(`"192.0.2.10:80/tcp",`, maxLedger/19)+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, big} {
		_, err := FileLedger{Path: path}.Owned()
		var bad *UnreadableError
		if !errors.As(err, &bad) {
			t.Errorf("%s: %v; want an UnreadableError", path, err)
		}
	}
}

func ptr(s string) *string { return &s }
