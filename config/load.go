package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"github.com/BurntSushi/toml"

	"github.com/lbdproject/lbd/config/internal/keypos"
	"github.com/lbdproject/lbd/config/internal/prescan"
	"github.com/lbdproject/lbd/config/internal/tree"
)

// ConfDirOf returns the drop-in directory that belongs to a main file.
func ConfDirOf(path string) string {
	return filepath.Join(filepath.Dir(path), DefaultConfDir)
}

// Files returns the files a load of path reads: path itself, then the
// *.toml files of its conf.d directory in lexical order. Hidden files are
// skipped so that editors' and package managers' leftovers never count.
func Files(path string) ([]string, error) {
	files := []string{path}
	entries, err := os.ReadDir(ConfDirOf(path))
	if errors.Is(err, os.ErrNotExist) {
		return files, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading drop-in directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || filepath.Ext(name) != ".toml" {
			continue
		}
		files = append(files, filepath.Join(ConfDirOf(path), name))
	}
	return files, nil
}

// Load reads, merges and validates the main file at path and its conf.d
// drop-ins, and checks the files the configuration refers to (see
// CheckFiles). It returns either a complete configuration or an ErrorList
// with every problem found (or an error when the main file cannot be
// found); never a partial configuration.
func Load(path string) (*Config, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	sink := &errorSink{}
	contents := make([][]byte, len(files))
	total := 0
	for i, f := range files {
		b, err := ReadFile(f)
		if i == 0 && errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("reading configuration: %w", err)
		}
		if err != nil {
			sink.add(&Error{Pos: Pos{File: f}, Msg: readProblem(err)})
			continue
		}
		if total += len(b); total > maxTotalSize {
			sink.add(tooMuch(f))
			break // what follows is not read at all
		}
		contents[i] = b
	}
	cfg := parse(files, func(i int) (string, bool) {
		// The bytes are Load's own and never change: they can be the text
		// without a copy. Nothing keeps a piece of it (see tree.Parse and
		// node.str), so each file's bytes go once it is parsed.
		b := contents[i]
		contents[i] = nil
		return unsafe.String(unsafe.SliceData(b), len(b)), b != nil
	}, sink)
	cfg.checkFiles(sink)
	return result(cfg, sink)
}

// Parse is Load on contents already read, without reading the files the
// configuration refers to: files[0] is the main file, the rest are
// drop-ins that may hold only [[service]] tables.
func Parse(files []string, contents [][]byte) (*Config, error) {
	sink := &errorSink{}
	total := 0
	cfg := parse(files, func(i int) (string, bool) {
		n := len(contents[i])
		switch {
		case n > maxFileSize:
			sink.add(&Error{Pos: Pos{File: files[i]}, Msg: fmt.Sprintf("larger than %s, the most lbd reads of one configuration file; expected a smaller file (the services can be spread over conf.d files)", sizeString(maxFileSize))})
			return "", false
		case total+n > maxTotalSize:
			sink.add(tooMuch(files[i]))
			return "", false
		}
		total += n
		return string(contents[i]), true
	}, sink)
	return result(cfg, sink)
}

func result(cfg *Config, sink *errorSink) (*Config, error) {
	if errs := sink.result(cfg.Files[0]); errs != nil {
		return nil, errs
	}
	return cfg, nil
}

// readProblem says why a configuration file could not be read, without its
// name (the error's position has it).
func readProblem(err error) string {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return err.Error()
	}
	var fp *fileProblem
	if errors.As(err, &fp) {
		return fp.Error()
	}
	return "cannot " + pe.Op + " it: " + pe.Err.Error()
}

func tooMuch(file string) *Error {
	return &Error{Pos: Pos{File: file}, Msg: fmt.Sprintf("with this file the configuration is larger than %s in all, the most lbd reads in one load; it and the files after it are not read: expected fewer or smaller files", sizeString(maxTotalSize))}
}

// parse parses and decodes files; text(i) returns the content of files[i],
// or false when it could not be read (a problem in sink says why). Every
// file is decoded and every check runs on whatever decoded, so that one
// problem never hides another.
func parse(files []string, text func(int) (string, bool), sink *errorSink) *Config {
	cfg := Defaults()
	cfg.Files = slices.Clone(files)
	cfg.refPos = map[string]Pos{}
	globalsOK := false
	for i, name := range files {
		t, ok := text(i)
		if !ok {
			continue
		}
		root, ok := parseTOML(name, t, sink)
		if !ok {
			continue
		}
		root.src.refPos = cfg.refPos
		if i == 0 {
			before := sink.count()
			decodeGlobals(root, &cfg)
			globalsOK = sink.count() == before
			decodeVRRP(root, &cfg)
			decodeHA(root, &cfg)
		} else {
			refuseGlobals(root, files[0])
		}
		ts := root.tables("service")
		cfg.Services = slices.Grow(cfg.Services, len(ts))
		root.src.reals = &realServers{want: countRealServers(ts)}
		for j, t := range ts {
			if len(cfg.Services) == maxServices {
				t.errorf("", "is service number %d; lbd takes at most %d services from its files: expected fewer services (the rest of them are not read)", maxServices+1, maxServices)
				break
			}
			cfg.Services = append(cfg.Services, decodeService(t))
			// Nothing looks into a decoded service's table again: let its
			// memory go while the next ones are decoded.
			t.t.Drop()
			ts[j] = nil
		}
		root.finish()
	}
	validate(&cfg, sink, globalsOK)
	for _, s := range cfg.Services {
		if s.Consul != nil || s.Register != nil {
			cfg.Consul.Enabled = true
		}
	}
	return &cfg
}

// countRealServers counts the tables in the real_server arrays of services,
// which is how many RealServers decodeService will need.
func countRealServers(services []*node) int {
	n := 0
	for _, s := range services {
		if v, ok := s.t.Get("real_server"); ok {
			if a, ok := v.(*tree.Array); ok {
				for _, e := range a.Elems {
					if _, ok := e.(*tree.Table); ok {
						n++
					}
				}
			}
		}
	}
	return n
}

// parseTOML checks the syntax of one file and prepares it for decoding.
// The limits come first (see prescan). Plain files are then read by
// tree.Parse, which finds the key positions on the way; anything else by
// BurntSushi/toml (and keypos for the positions), which has the last word
// on what is valid TOML and how it is refused, but needs ~100 times the
// file in memory: only files up to maxGenericSize go that way.
func parseTOML(name, text string, errs *errorSink) (*node, bool) {
	if r := prescan.Scan(text, fileLimits); r.Exceeded != prescan.NoLimit {
		errs.add(&Error{Pos: Pos{File: name, Line: r.Line, Col: r.Col}, Msg: limitProblem(r)})
		return nil, false
	}
	stop := tree.Pos{Line: 1, Col: 1}
	if !forceGeneric {
		root, at, ok := tree.Parse(text)
		if ok {
			return newNode(&source{name: name, tree: root, errs: errs}, "", root), true
		}
		stop = at
	}
	if len(text) > maxGenericSize {
		errs.add(&Error{Pos: Pos{File: name, Line: int(stop.Line), Col: int(stop.Col)}, Msg: fmt.Sprintf(
			"TOML syntax error, or TOML beyond the plain subset lbd reads in files of any size (quoted or dotted keys, escape sequences, multi-line strings, dates, exponents, a table defined twice), which lbd reads only in files of at most %s and this one is %s; expected plain TOML from here on, or the services spread over conf.d files",
			sizeString(maxGenericSize), sizeString(int64(len(text))))})
		return nil, false
	}
	var m map[string]any
	if _, err := toml.Decode(text, &m); err != nil {
		// The parser gives no line for some errors at the end of the text
		// (an escape cut short by it): they are on its last line.
		at := Pos{File: name, Line: 1 + strings.Count(text, "\n")}
		msg := "TOML syntax error: " + err.Error()
		var pe toml.ParseError
		if errors.As(err, &pe) {
			msg = "TOML syntax error: " + pe.Message
			if pe.Usage != "" {
				msg += " (" + strings.TrimSpace(strings.SplitN(pe.Usage, "\n", 2)[0]) + ")"
			}
			if pe.Position.Line >= 1 {
				at.Line, at.Col = pe.Position.Line, pe.Position.Col
			}
		}
		errs.add(newError(at, "", "%s", msg))
		return nil, false
	}
	src := &source{name: name, pos: keypos.Scan(text), errs: errs}
	return newNode(src, "", tree.FromMap(m)), true
}

// fileLimits bound each file (see prescan); none is near what a valid
// configuration needs.
var fileLimits = prescan.Limits{Depth: maxDepth, Values: maxValues, PathBytes: maxPathBytes}

// limitProblem says which limit r exceeded.
func limitProblem(r prescan.Result) string {
	switch r.Exceeded {
	case prescan.Depth:
		return fmt.Sprintf("nesting deeper than %d levels (each part of a [table] header or dotted key, each array and each inline table is one); lbd's configuration needs at most %d", maxDepth, neededDepth)
	case prescan.Values:
		return fmt.Sprintf("more than %d keys and array elements in one file; expected fewer (the services can be spread over conf.d files)", maxValues)
	}
	return fmt.Sprintf("the paths of the keys and array elements are more than %s long in all (long keys, or many keys under long ones); expected shorter keys or fewer of them: lbd's keys are short", sizeString(maxPathBytes))
}

// forceGeneric makes every file go the way of BurntSushi/toml and keypos,
// so that tests can compare the two ways.
var forceGeneric = false

// refuseGlobals keeps global settings in the main file only, so that one
// place says how the box behaves.
func refuseGlobals(root *node, mainFile string) {
	for _, k := range []string{"sync", "dataplane", "ipvs", "status", "consul", "vrrp", "vrrp_sync_group", "ha"} {
		if _, ok := root.get(k); ok {
			root.errorf(k, "global settings are accepted only in the main file %s; drop-in files hold [[service]] tables", mainFile)
		}
	}
}
