package file

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"

	"github.com/lbdproject/lbd/config"
)

// Hash names the content of the configuration at path (with its conf.d)
// as Status.Hash does for the configuration a Source of path delivered:
// the same files give the same hash.
func Hash(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("config path %q: %w", path, err)
	}
	fp, _ := fingerprint(abs)
	return short(fp), nil
}

// fingerprint hashes the names and content of the files config.Load reads
// (config.Files), including any error reading them, and returns those files.
// Configurations are small: reading them is cheaper than being wrong about
// an mtime. They are read as config.Load reads them (config.ReadFile): a
// FIFO or device among them is an error to hash, never a read that blocks
// the watcher or fills the memory.
func fingerprint(mainFile string) (string, []string) {
	h := sha256.New()
	files, err := config.Files(mainFile)
	if err != nil {
		fmt.Fprintf(h, "error %v\x00", err)
		files = []string{mainFile}
	}
	for _, p := range files {
		data, err := config.ReadFile(p)
		if err != nil {
			fmt.Fprintf(h, "%s\x00error %v\x00", p, err)
			continue
		}
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(data))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil)), files
}

func short(fp string) string { return fp[:12] }
