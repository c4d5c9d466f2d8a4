package config

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Limits on what one load reads, documented in docs/config-reference.md
// ("Limits"). They bound the memory and time of a load, and so of a hot
// reload, whatever the files hold: a configuration that decodes without
// errors is far below each of them.
const (
	// maxFileSize is the most lbd reads of one configuration file. The
	// benchmark configuration of 10,000 services × 10 real servers in
	// one file is 7 MB.
	maxFileSize = 16 << 20
	// maxTotalSize is the most one load reads from all its files:
	// 65,000 services × 10 real servers (scripts/bench.sh's most) take
	// about 46 MB, in conf.d files of at most maxFileSize.
	maxTotalSize = 64 << 20
	// maxServices bounds the services of one load, whose decoded form
	// takes ~1.7 KB each: ten times the benchmark configuration's.
	maxServices = 100_000
	// maxGenericSize is the largest file that may use TOML beyond the
	// plain subset tree.Parse reads (quoted or dotted keys, escapes,
	// multi-line strings, dates ...): the general parser needs ~100 times
	// its input in memory.
	maxGenericSize = 2 << 20
	// maxRefSize is the most lbd reads of a file the configuration refers
	// to: a Consul token, CA bundle, certificate or key.
	maxRefSize = 1 << 20
	// maxErrors is the most problems one load lists; a line then says how
	// many more there are.
	maxErrors = 1000

	// maxDepth bounds the nesting of one file (see prescan.Limits.Depth);
	// neededDepth is the deepest that lbd's schema goes: a real server's
	// expect_status written inline, [[service]] real_server = [{
	// health_check = { expect_status = [200] } }].
	maxDepth    = 32
	neededDepth = 8
	// maxValues bounds the keys, headers and array elements of one file:
	// the 10,000 × 10 benchmark configuration has 480,000.
	maxValues = 2_000_000
	// maxPathBytes bounds the sum of the lengths of their paths, which
	// parsers keep one string of each of: 12 MB in the benchmark
	// configuration.
	maxPathBytes = 64 << 20
)

// ReadFile reads a configuration file as Load does: only a regular file
// (after following symlinks; a FIFO, device or directory is refused without
// blocking on it) of at most the per-file limit. discovery/file hashes the
// files with it, so that it never reads more than Load would.
func ReadFile(path string) ([]byte, error) {
	return readRegular(path, maxFileSize)
}

// fileProblem is why readRegular refuses a file it could open.
type fileProblem struct{ msg string }

func (p *fileProblem) Error() string { return p.msg }

// readRegular reads the regular file at path, refusing anything larger
// than limit. It stats first, so that a FIFO is never opened (an open for
// reading blocks until a writer comes), opens with O_NONBLOCK in case the
// path was swapped for one in between, and checks the opened file again.
func readRegular(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := regular(path, fi, limit); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regular(path, fi, limit); err != nil {
		return nil, err
	}
	// Sized by the stat (bytes.Buffer wants MinRead spare bytes before it
	// reads the end), but read to the end however the file grew: one byte
	// past the limit says it was exceeded.
	buf := bytes.NewBuffer(make([]byte, 0, fi.Size()+bytes.MinRead))
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(buf.Len()) > limit {
		return nil, tooLarge(path, limit)
	}
	return buf.Bytes(), nil
}

// regular checks that fi, the stat of path, is a regular file within limit.
func regular(path string, fi os.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return &fs.PathError{Op: "read", Path: path, Err: &fileProblem{"not a regular file (" + fileKind(fi.Mode()) + "); lbd reads only regular files"}}
	}
	if fi.Size() > limit {
		return tooLarge(path, limit)
	}
	return nil
}

func tooLarge(path string, limit int64) error {
	return &fs.PathError{Op: "read", Path: path, Err: &fileProblem{"larger than " + sizeString(limit) + ", the most lbd reads of such a file"}}
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return "mode " + m.String()
}

// sizeString renders a byte count as lbd's limits are written: "16 MiB".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
