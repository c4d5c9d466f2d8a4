package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/daemon"
	"github.com/lbdproject/lbd/internal/manpage"
)

// newManCommand returns the hidden "lbd man DIR" command, which writes the
// lbd(8) manual page from the command tree, so that the page lists every
// command and flag the binary has. The package build runs it.
func newManCommand() *cobra.Command {
	return &cobra.Command{
		Use:    "man DIR",
		Short:  "Write the lbd(8) manual page into DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			date, err := manDate()
			if err != nil {
				return err
			}
			path := filepath.Join(args[0], "lbd.8")
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			manpage.Write(f, c.Root(), lbdPage(buildVersion(), date))
			if err := f.Close(); err != nil {
				return fmt.Errorf("writing %s: %w", path, err)
			}
			return nil
		},
	}
}

// manDate is the page's date: SOURCE_DATE_EPOCH when set, for reproducible
// builds, else today.
func manDate() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Now().UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: expected seconds since 1970", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// lbdPage is what lbd(8) says besides the commands.
func lbdPage(version string, date time.Time) manpage.Page {
	return manpage.Page{
		Name:    "lbd",
		Section: "8",
		Version: version,
		Date:    date,
		Files: [][2]string{
			{config.DefaultPath, "The main configuration file: global settings and services."},
			{filepath.Join(filepath.Dir(config.DefaultPath), config.DefaultConfDir, "*.toml"), "Drop-in files with more services, merged in lexical order. Other names are ignored."},
			{filepath.Join(daemon.DefaultStateDir, daemon.LedgerFile), "Which IPVS virtual servers lbd owns (--state-dir). Keep it across restarts: lbd cleanup and a restarted lbd rely on it."},
			{config.Defaults().Status.Socket, "The root-only socket lbd status talks to ([status] socket)."},
			{"/etc/modules-load.d/lbd.conf", "Kernel modules lbd needs (IPVS and its schedulers, ipsets, netfilter matches, dummy), loaded at boot and before lbd starts."},
			{"/etc/modprobe.d/lbd.conf", "Module options, such as the size of the IPVS connection table (conn_tab_bits)."},
			{"/usr/lib/sysctl.d/60-lbd.conf", "The sysctls lbd relies on, applied at boot and before lbd starts; override them in /etc/sysctl.d/60-lbd.conf."},
		},
		ExitStatus: "0 on success; 1 when the configuration is invalid or the kernel refused a change; 2 on a usage error; 3 when lbd status cannot reach the daemon.",
		SeeAlso:    []string{"ipvsadm(8)", "ipset(8)", "iptables(8)", "systemd.service(5)", "sysctl.d(5)", "modules-load.d(5)"},
	}
}
