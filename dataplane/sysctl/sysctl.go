// Package sysctl checks and sets the kernel settings lbd relies on.
//
// Under the hardened systemd unit /proc/sys is read-only for lbd: the
// package's sysctl.d file sets these before lbd starts, and lbd only
// verifies them, reporting any it cannot fix.
package sysctl

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// Setting is one sysctl and the value lbd needs, with why.
type Setting struct {
	Key   string // e.g. "net/ipv4/ip_forward"
	Value string
	Why   string
}

// Required returns the settings lbd relies on. IPv6 forwarding is set
// per interface with accept_ra=2 elsewhere, since turning it on globally
// stops router advertisements from configuring the box.
func Required() []Setting {
	return []Setting{
		{"net/ipv4/ip_forward", "1", "IPVS NAT forwards replies of real servers back to clients"},
		{"net/ipv4/vs/conntrack", "1", "iptables MASQUERADE and conntrack see IPVS connections"},
		{"net/ipv4/vs/expire_nodest_conn", "1", "connections to a deleted real server end at once instead of hanging"},
		{"net/ipv4/vs/expire_quiescent_template", "1", "persistence does not keep clients on a real server at weight 0"},
	}
}

// Ensure reads each setting under root (normally /proc/sys), writes the
// ones that differ, and returns an error listing those it could not set.
func Ensure(root string, settings []Setting, log *slog.Logger) error {
	var errs []error
	for _, s := range settings {
		p := filepath.Join(root, s.Key)
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w (needed: %s)", dotted(s.Key), err, s.Why))
			continue
		}
		if strings.TrimSpace(string(b)) == s.Value {
			continue
		}
		if err := os.WriteFile(p, []byte(s.Value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("%s is %s and cannot be set to %s: %w (needed: %s; set it in /etc/sysctl.d)",
				dotted(s.Key), strings.TrimSpace(string(b)), s.Value, err, s.Why))
			continue
		}
		log.Info("sysctl set", "key", dotted(s.Key), "value", s.Value, "why", s.Why)
	}
	return errors.Join(errs...)
}

func dotted(key string) string { return strings.ReplaceAll(key, "/", ".") }
