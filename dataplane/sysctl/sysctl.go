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

// Required returns the settings lbd relies on; ipv6 adds IPv6
// forwarding, for configurations with IPv6 services, and strictARP keeps
// the kernel from answering ARP for VIPs (on the dummy link) on other
// interfaces, as kube-proxy's strictARP does.
func Required(ipv6, strictARP bool) []Setting {
	s := []Setting{
		{"net/ipv4/ip_forward", "1", "IPVS NAT forwards replies of real servers back to clients"},
		{"net/ipv4/vs/conntrack", "1", "iptables MASQUERADE and conntrack see IPVS connections"},
		{"net/ipv4/vs/expire_nodest_conn", "1", "connections to a deleted real server end at once instead of hanging"},
		{"net/ipv4/vs/expire_quiescent_template", "1", "persistence does not keep clients on a real server at weight 0"},
	}
	if ipv6 {
		s = append(s, Setting{"net/ipv6/conf/all/forwarding", "1", "IPVS NAT forwards replies of IPv6 real servers back to clients"})
	}
	if strictARP {
		s = append(s,
			Setting{"net/ipv4/conf/all/arp_ignore", "1", "strict_arp: answer ARP only for addresses of the interface asked"},
			Setting{"net/ipv4/conf/all/arp_announce", "2", "strict_arp: never announce a VIP as the source of ARP requests"})
	}
	return s
}

// KeepRouterAdvertisements sets accept_ra=2 on every interface that takes
// router advertisements (accept_ra=1), before IPv6 forwarding is turned
// on: with forwarding, accept_ra=1 stops honouring them and the box would
// lose its SLAAC addresses and default route.
func KeepRouterAdvertisements(root string, log *slog.Logger) error {
	paths, err := filepath.Glob(filepath.Join(root, "net/ipv6/conf/*/accept_ra"))
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range paths {
		iface := filepath.Base(filepath.Dir(p))
		if iface == "all" || iface == "lo" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			continue
		}
		if err := os.WriteFile(p, []byte("2"), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("net.ipv6.conf.%s.accept_ra: %w (set it to 2 before enabling forwarding)", iface, err))
			continue
		}
		log.Info("sysctl set", "key", "net.ipv6.conf."+iface+".accept_ra", "value", "2", "why", "keep router advertisements with IPv6 forwarding on")
	}
	return errors.Join(errs...)
}

// Report logs the sizes that bound how many connections the box can hold,
// which are set outside lbd (module options, sysctl.d).
func Report(root string, log *slog.Logger) {
	read := func(key string) string {
		b, err := os.ReadFile(filepath.Join(root, key))
		if err != nil {
			return "unknown"
		}
		return strings.TrimSpace(string(b))
	}
	log.Info("connection tables",
		"nf_conntrack_max", read("net/netfilter/nf_conntrack_max"),
		"nf_conntrack_count", read("net/netfilter/nf_conntrack_count"),
		"hint", "raise the IPVS table with 'options ip_vs conn_tab_bits=N' in /etc/modprobe.d and nf_conntrack_max in /etc/sysctl.d")
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

// Needs says which kernel settings lbd's configuration relies on.
type Needs struct {
	// IPv6: some service is, or Consul may define one that is, IPv6.
	IPv6 bool
	// StrictARP: the box must not answer ARP for the VIPs on lbd's dummy
	// interface (kube-proxy's strictARP).
	StrictARP bool
}

// Setup checks and sets the settings needs calls for under root (/proc/sys);
// what cannot be set is logged, not fatal, since a read-only /proc/sys (the
// hardened unit) is handled by the package's sysctl.d file.
func Setup(root string, needs Needs, log *slog.Logger) {
	if needs.IPv6 {
		if err := KeepRouterAdvertisements(root, log); err != nil {
			log.Warn("cannot keep router advertisements", "error", err)
		}
	}
	if err := Ensure(root, Required(needs.IPv6, needs.StrictARP), log); err != nil {
		log.Warn("kernel settings lbd relies on are not in place", "error", err)
	}
}
