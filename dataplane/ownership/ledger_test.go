package ownership

import (
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/lbdproject/lbd/lvs"
)

func TestFileLedgerRoundTrip(t *testing.T) {
	l := FileLedger{Path: filepath.Join(t.TempDir(), "run", "owned.json")}
	got, err := l.Owned()
	if err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v; want nothing owned", got, err)
	}
	keys := map[lvs.Key]bool{
		{Addr: netip.MustParseAddr("192.0.2.10"), Port: 80, Protocol: lvs.TCP}:   true,
		{Addr: netip.MustParseAddr("2001:db8::53"), Port: 53, Protocol: lvs.UDP}: true,
	}
	if err := l.SetOwned(keys); err != nil {
		t.Fatal(err)
	}
	got, err = l.Owned()
	if err != nil || !maps.Equal(got, keys) {
		t.Errorf("read back %v, %v; want %v", got, err, keys)
	}
	if err := os.WriteFile(l.Path, []byte(`{"version":1,"ipvs":["nope"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Owned(); err == nil {
		t.Errorf("a corrupt ledger was accepted")
	}
}
