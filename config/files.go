package config

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// CheckFiles checks the files the configuration refers to, as the daemon
// will use them: the Consul token_file (one non-empty line), the
// [consul.tls] ca_file (PEM with at least one certificate) and cert_file
// with key_file (a key pair), each a regular file of at most 1 MiB that
// can be read; and the program of each exec health check and each VRRP
// notify key (a regular, executable file). Problems are an ErrorList
// located at the key that names the file. Load runs it; Parse does not.
func (c *Config) CheckFiles() error {
	sink := &errorSink{}
	c.checkFiles(sink)
	main := ""
	if len(c.Files) > 0 {
		main = c.Files[0]
	}
	if errs := sink.result(main); errs != nil {
		return errs
	}
	return nil
}

// checkFiles adds the problems of the files c refers to to sink.
func (c *Config) checkFiles(sink *errorSink) {
	at := func(key string, fallback Pos) Pos {
		if p, ok := c.refPos[key]; ok {
			return p
		}
		if fallback.File == "" && len(c.Files) > 0 {
			fallback.File = c.Files[0]
		}
		return fallback
	}
	problem := func(key string, fallback Pos, format string, args ...any) {
		sink.add(newError(at(key, fallback), key, format, args...))
	}
	readProblem := func(key string, err error) {
		format, args := refReadProblem(err)
		problem(key, Pos{}, format, args...)
	}
	cc := &c.Consul
	// A relative path is refused where it is decoded.
	if filepath.IsAbs(cc.TokenFile) {
		const key = "consul.token_file"
		if b, err := readRegular(cc.TokenFile, maxRefSize); err != nil {
			readProblem(key, err)
		} else if tok := bytes.TrimSpace(b); len(tok) == 0 {
			problem(key, Pos{}, "%s is empty; expected the Consul ACL token", cc.TokenFile)
		} else if bytes.ContainsAny(tok, "\r\n") {
			problem(key, Pos{}, "%s holds more than one line; expected the Consul ACL token alone", cc.TokenFile)
		}
	}
	if filepath.IsAbs(cc.TLS.CAFile) {
		const key = "consul.tls.ca_file"
		if b, err := readRegular(cc.TLS.CAFile, maxRefSize); err != nil {
			readProblem(key, err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			problem(key, Pos{}, "%s holds no PEM certificate; expected the CA certificate(s) of the Consul agent, PEM-encoded", cc.TLS.CAFile)
		}
	}
	if filepath.IsAbs(cc.TLS.CertFile) && filepath.IsAbs(cc.TLS.KeyFile) {
		cert, certErr := readRegular(cc.TLS.CertFile, maxRefSize)
		if certErr != nil {
			readProblem("consul.tls.cert_file", certErr)
		}
		key, keyErr := readRegular(cc.TLS.KeyFile, maxRefSize)
		if keyErr != nil {
			readProblem("consul.tls.key_file", keyErr)
		}
		if certErr == nil && keyErr == nil {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				problem("consul.tls.cert_file", Pos{}, "%s and key_file %s are not a key pair: %s; expected a PEM certificate and its PEM private key", cc.TLS.CertFile, cc.TLS.KeyFile, err.Error())
			}
		}
	}
	c.checkPrograms(func(key string, hc *HealthCheck, format string, args ...any) {
		problem(key, hc.Pos, format, args...)
	})
	c.checkNotifyPrograms(problem)
	if ct := c.Conntrackd; ct.Enabled && isAbs(ct.Program) {
		if format, args := programProblem(ct.Program, "conntrackd", "a program lbd may run"); format != "" {
			problem("ha.conntrackd.program", ct.Pos, format, args...)
		}
	}
}

// programProblem says what is wrong with prog as a program lbd runs
// (format is empty when nothing is): it exists, is a regular file and
// executable. what and may complete the messages' "expected".
func programProblem(prog, what, may string) (format string, args []any) {
	fi, err := os.Stat(prog)
	switch {
	case err != nil:
		return refReadProblem(err)
	case !fi.Mode().IsRegular():
		return "%s is not a regular file (%s); expected " + what, []any{prog, fileKind(fi.Mode())}
	case fi.Mode().Perm()&0o111 == 0:
		return "%s is not executable (mode %s); expected " + may, []any{prog, fi.Mode().Perm()}
	}
	return "", nil
}

// checkPrograms checks the program of each exec health check once.
func (c *Config) checkPrograms(problem func(key string, hc *HealthCheck, format string, args ...any)) {
	seen := map[string]bool{}
	check := func(key string, hc *HealthCheck) {
		if hc == nil || hc.Type != CheckExec || len(hc.Command) == 0 || !filepath.IsAbs(hc.Command[0]) || seen[hc.Command[0]] {
			return
		}
		prog := hc.Command[0]
		seen[prog] = true
		if format, args := programProblem(prog, "the program the check runs", "a program the check's user may run"); format != "" {
			problem(key, hc, format, args...)
		}
	}
	for i := range c.Services {
		s := &c.Services[i]
		check(s.path+".health_check.command", s.HealthCheck)
		for j := range s.RealServers {
			if hc := s.RealServers[j].HealthCheck; hc != s.HealthCheck {
				check(s.path+".real_server["+strconv.Itoa(j)+"].health_check.command", hc)
			}
		}
	}
}

// refReadProblem says why a referenced file could not be read, with its
// name: "open /etc/lbd/token: permission denied". The name is an argument
// of its own, to be cut if need be without cutting the reason.
func refReadProblem(err error) (format string, args []any) {
	var pe *fs.PathError
	if !errors.As(err, &pe) {
		return "%s", []any{err.Error()}
	}
	var fp *fileProblem
	if errors.As(err, &fp) {
		return "%s: %s", []any{pe.Path, fp.msg}
	}
	return "%s %s: %s", []any{pe.Op, pe.Path, pe.Err.Error()}
}
