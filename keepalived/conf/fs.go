package conf

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"testing/fstest"
)

// FS is what the parser needs of a file system. Names are slash paths,
// absolute or relative to the working directory, as keepalived's are.
type FS interface {
	Open(name string) (fs.File, error)
	// Stat follows symbolic links; Lstat does not.
	Stat(name string) (fs.FileInfo, error)
	Lstat(name string) (fs.FileInfo, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// Realpath is the absolute path without symbolic links, as getcwd(3)
	// names a directory keepalived has changed into.
	Realpath(name string) (string, error)
}

// OSFS is the machine's file system.
type OSFS struct{}

func (OSFS) Open(name string) (fs.File, error)          { return os.Open(name) }
func (OSFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
func (OSFS) Lstat(name string) (fs.FileInfo, error)     { return os.Lstat(name) }
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

func (OSFS) Realpath(name string) (string, error) {
	abs, err := filepath.Abs(name)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// MapFS is an in-memory file system for tests and fuzzing: the keys of m
// are paths below "/", which is also the working directory. It has no
// symbolic links.
func MapFS(m fstest.MapFS) FS { return mapFS{m} }

type mapFS struct{ m fstest.MapFS }

// key turns a keepalived path into an fs.FS name.
func (mapFS) key(name string) string {
	if !path.IsAbs(name) {
		name = "/" + name
	}
	name = path.Clean(name)
	if name == "/" {
		return "."
	}
	return name[1:]
}

func (f mapFS) Open(name string) (fs.File, error)      { return f.m.Open(f.key(name)) }
func (f mapFS) Stat(name string) (fs.FileInfo, error)  { return fs.Stat(f.m, f.key(name)) }
func (f mapFS) Lstat(name string) (fs.FileInfo, error) { return fs.Stat(f.m, f.key(name)) }

func (f mapFS) ReadDir(name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(f.m, f.key(name))
}

func (f mapFS) Realpath(name string) (string, error) {
	if _, err := f.Stat(name); err != nil {
		return "", err
	}
	return path.Clean("/" + f.key(name)), nil
}
