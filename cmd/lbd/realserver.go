package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/lbdproject/lbd/lvs"
	"github.com/lbdproject/lbd/realserver"
)

// realServerFlags are the flags setup, check and undo share.
type realServerFlags struct {
	method, tunnel, record string
	vips                   []string
	guePort                uint16
	json                   bool
}

// add defines the flags on c: --json for setup and check, --record for
// setup and undo.
func (f *realServerFlags) add(c *cobra.Command, withJSON, withRecord bool) {
	c.Flags().StringVar(&f.method, "method", "", `the director's forwarding method for this box: "dr" or "tun" (required)`)
	c.Flags().StringArrayVar(&f.vips, "vip", nil, "a VIP the director sends to this box, IPv4 or IPv6 (repeat for more; required)")
	c.Flags().StringVar(&f.tunnel, "tunnel", "ipip", `with --method tun, the encapsulation: "ipip", "gue" or "gre" (the service's tunnel_type)`)
	c.Flags().Uint16Var(&f.guePort, "gue-port", 6080, "with --tunnel gue, the UDP port the director sends to (the service's tunnel_port)")
	if withRecord {
		c.Flags().StringVar(&f.record, "record", realserver.DefaultRecord, "where setup records what it changed, for undo")
	}
	if withJSON {
		c.Flags().BoolVar(&f.json, "json", false, "print the checks as JSON")
	}
}

// spec turns the flags into what the package sets up; a mistake is a
// usage error.
func (f *realServerFlags) spec(c *cobra.Command) (realserver.Spec, error) {
	var s realserver.Spec
	switch f.method {
	case "dr":
		s.Method = lvs.DR
		for _, n := range []string{"tunnel", "gue-port"} {
			if c.Flags().Changed(n) {
				return s, &exitError{code: 2, err: fmt.Errorf("--%s is for --method tun only", n)}
			}
		}
	case "tun":
		s.Method = lvs.Tunnel
	default:
		return s, &exitError{code: 2, err: fmt.Errorf("--method %q: expected dr or tun", f.method)}
	}
	switch f.tunnel {
	case "ipip":
		s.Tunnel = lvs.IPIP
	case "gue":
		s.Tunnel = lvs.GUE
		s.GUEPort = f.guePort
	case "gre":
		s.Tunnel = lvs.GRE
	default:
		return s, &exitError{code: 2, err: fmt.Errorf("--tunnel %q: expected ipip, gue or gre", f.tunnel)}
	}
	for _, v := range f.vips {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return s, &exitError{code: 2, err: fmt.Errorf("--vip %q: expected an IPv4 or IPv6 address", v)}
		}
		s.VIPs = append(s.VIPs, a)
	}
	if err := s.Validate(); err != nil {
		return s, &exitError{code: 2, err: err}
	}
	return s, nil
}

// withKernel validates the flags and runs fn with the box's kernel.
func (f *realServerFlags) withKernel(c *cobra.Command, fn func(realserver.Spec, realserver.Kernel) error) error {
	s, err := f.spec(c)
	if err != nil {
		return err
	}
	k, err := realserver.OpenKernel("/proc/sys")
	if err != nil {
		return err
	}
	defer k.Close()
	return fn(s, k)
}

// withRecord is withKernel with the record of what setup changed: loaded
// before fn, saved after it (also when fn fails half-way).
func (f *realServerFlags) withRecord(c *cobra.Command, fn func(realserver.Spec, realserver.Kernel, *realserver.Record) error) error {
	return f.withKernel(c, func(s realserver.Spec, k realserver.Kernel) error {
		rec, err := realserver.LoadRecord(f.record)
		if err != nil {
			return err
		}
		err = fn(s, k, rec)
		if serr := rec.Save(f.record); serr != nil && err == nil {
			err = serr
		}
		return err
	})
}

func newRealServerCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "realserver",
		Short: "Set up and check a real server for direct routing or tunnelling (run on the real server)",
		Long: `Set up, check and undo what a real server needs when the director forwards
to it by direct routing (forward = "dr") or through a tunnel (forward = "tun").
Run these on the real server, not on the director. For DR each VIP goes on
lo and net.ipv4.conf.all.arp_ignore=1 and arp_announce=2 keep the box from
answering ARP for it or announcing it; for TUN the kernel's tunnel device
(tunl0, gre0, ip6tnl0 or ip6gre0, and a fou port for GUE) is brought up and
rp_filter turned off on it, with the VIPs on lo as for DR. Nothing here
survives a reboot: run setup at boot (docs/realserver.md has a unit).`,
		Args: cobra.NoArgs,
	}
	c.AddCommand(newRealServerSetupCommand(), newRealServerCheckCommand(), newRealServerUndoCommand())
	return c
}

func newRealServerSetupCommand() *cobra.Command {
	var f realServerFlags
	c := &cobra.Command{
		Use:   "setup",
		Short: "Set this box up as a DR or TUN real server",
		Long: `Make every check of "lbd realserver check" pass that a change can fix:
load the tunnel module, set the sysctls (before any VIP goes on lo, so the box
never answers ARP for one), bring the tunnel device up, add the fou port and
the VIPs. Running it again changes nothing. It records what it changed in
--record for undo, and removes nothing it did not add: addresses of the admin's
that are in the way are reported with the command that fixes them. Exit
status 0 when every check passes afterwards, 1 otherwise.`,
		Example: `lbd realserver setup --method dr --vip 198.18.100.1 --vip 2001:2::100
lbd realserver setup --method tun --tunnel gue --gue-port 6080 --vip 198.18.100.1`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.withRecord(c, func(s realserver.Spec, k realserver.Kernel, rec *realserver.Record) error {
				res, err := realserver.Setup(k, s, rec)
				out := c.OutOrStdout()
				for _, a := range res.Done {
					fmt.Fprintln(out, "done:", a.Command())
				}
				if err != nil {
					return err
				}
				if len(res.Done) == 0 {
					fmt.Fprintln(out, "nothing to change")
				}
				return report(out, res.Report, f.json)
			})
		},
	}
	f.add(c, true, true)
	return c
}

func newRealServerCheckCommand() *cobra.Command {
	var f realServerFlags
	c := &cobra.Command{
		Use:   "check",
		Short: "Check this box's DR or TUN real-server setup",
		Long: `Check, one line each, what a DR or TUN real server needs: lo up, the tunnel
device up (TUN), the fou port (GUE), net.ipv4.conf.all.arp_ignore and
arp_announce and their effective values on every interface that answers ARP
(the kernel uses the larger of all and the interface's own), rp_filter on all
and the tunnel device (TUN), and each VIP on lo. A failing line says what is
wrong and the command that fixes it. Warnings (exit status unaffected) name
what breaks DR but setup leaves alone: a VIP also bound on another interface.
Routing back to the clients cannot be checked from here. Changes nothing.
Exit status 0 when every check passes, 1 otherwise.`,
		Example: `lbd realserver check --method dr --vip 198.18.100.1 --json`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.withKernel(c, func(s realserver.Spec, k realserver.Kernel) error {
				st, err := k.Read()
				if err != nil {
					return err
				}
				return report(c.OutOrStdout(), realserver.Check(s, st), f.json)
			})
		},
	}
	f.add(c, true, false)
	return c
}

func newRealServerUndoCommand() *cobra.Command {
	var f realServerFlags
	c := &cobra.Command{
		Use:   "undo",
		Short: "Take back what setup changed for these VIPs",
		Long: `Remove the VIPs setup added (and only those), and once no VIP that setup
added is left, restore the sysctls it changed, bring down the tunnel device
it brought up and remove its fou port, each only while it is still as setup
left it (as --record says). Modules stay loaded and lo stays up.`,
		Example: `lbd realserver undo --method dr --vip 198.18.100.1`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return f.withRecord(c, func(s realserver.Spec, k realserver.Kernel, rec *realserver.Record) error {
				u, err := realserver.Undo(k, s, rec)
				for _, a := range u.Done {
					fmt.Fprintln(c.OutOrStdout(), "done:", a.Command())
				}
				for _, l := range u.Left {
					fmt.Fprintln(c.OutOrStdout(), "left:", l)
				}
				return err
			})
		},
	}
	f.add(c, false, true)
	return c
}

// report prints r and makes a failing check exit 1.
func report(w io.Writer, r realserver.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		realserver.WriteText(w, r)
	}
	if !r.OK() {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d checks fail", r.Count(realserver.Fail), len(r.Items))}
	}
	return nil
}
