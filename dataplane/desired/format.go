package desired

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/lvs"
)

// WriteIPVS writes the IPVS part of st in `ipvsadm -Sn` form, so that it
// can be compared with, or fed to, ipvsadm.
func WriteIPVS(w io.Writer, st State) error {
	var b strings.Builder
	for _, s := range st.Services {
		b.WriteString(ServiceRule(s))
		b.WriteByte('\n')
		for _, d := range s.Dests {
			method, tunnel := forwardFlags(d.Forward())
			fmt.Fprintf(&b, "-a %s -r %s %s -w %d%s\n", serviceFlag(s.Key), d.Addr, method, d.Weight, tunnel)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ServiceRule renders one virtual server as ipvsadm's -A line, options in
// the order `ipvsadm -Sn` prints them (persistence before scheduler flags).
func ServiceRule(s Service) string {
	line := fmt.Sprintf("-A %s -s %s", serviceFlag(s.Key), s.Scheduler)
	if s.Flags&FlagPersistent != 0 {
		line += fmt.Sprintf(" -p %d", s.Timeout)
	}
	if f := schedFlagNames(s); f != "" {
		line += " -b " + f
	}
	return line
}

func serviceFlag(k lvs.Key) string {
	if k.IsFWMark() {
		if k.Family() == lvs.IPv6 {
			return fmt.Sprintf("-f %d -6", k.FWMark)
		}
		return fmt.Sprintf("-f %d", k.FWMark)
	}
	opt := "-t"
	switch k.Protocol {
	case lvs.UDP:
		opt = "-u"
	case lvs.SCTP:
		opt = "--sctp-service" // ipvsadm has no short option for it
	}
	return fmt.Sprintf("%s %s", opt, netipAddrPort(k))
}

// forwardFlags renders a destination's forwarding method as ipvsadm's
// method option and the tunnel options that follow the weight.
func forwardFlags(f lvs.Forward) (method, tunnel string) {
	switch f.Method {
	case lvs.DR:
		return "-g", ""
	case lvs.Tunnel:
	default:
		return "-m", ""
	}
	tunnel = " --tun-type " + f.Tunnel.String()
	if f.Tunnel == lvs.IPIP {
		return "-i", tunnel
	}
	if f.Tunnel == lvs.GUE {
		tunnel += fmt.Sprintf(" --tun-port %d", f.Port)
	}
	switch f.Checksum {
	case lvs.Checksummed:
		tunnel += " --tun-csum"
	case lvs.RemoteChecksum:
		tunnel += " --tun-remcsum"
	default:
		tunnel += " --tun-nocsum"
	}
	return "-i", tunnel
}

func netipAddrPort(k lvs.Key) string {
	if k.Addr.Is6() {
		return fmt.Sprintf("[%s]:%d", k.Addr, k.Port)
	}
	return fmt.Sprintf("%s:%d", k.Addr, k.Port)
}

func schedFlagNames(s Service) string {
	var names []string
	prefix := s.Scheduler
	if prefix != "sh" && prefix != "mh" {
		return ""
	}
	if s.Flags&FlagSched1 != 0 {
		names = append(names, prefix+"-fallback")
	}
	if s.Flags&FlagSched2 != 0 {
		names = append(names, prefix+"-port")
	}
	return strings.Join(names, ",")
}

// WritePlan writes st as `lbd plan` prints it: each subsystem in the
// form its own tool restores (ipvsadm -Sn, ipset restore,
// iptables-restore), with dp's interface and packet filter.
func WritePlan(w io.Writer, st State, cfg *config.Config) error {
	dp := cfg.Dataplane
	fmt.Fprintln(w, "# IPVS (ipvsadm -Sn)")
	if err := WriteIPVS(w, st); err != nil {
		return err
	}
	vips := make([]string, len(st.VIPs))
	for i, v := range st.VIPs {
		vips[i] = v.String()
	}
	fmt.Fprintf(w, "\n# VIPs on %s\n%s\n", dp.Interface, strings.Join(vips, "\n"))
	if len(st.NodeAddrs) > 0 {
		fmt.Fprintf(w, "\n# node addresses (NodePort-like services)\n")
		for _, a := range st.NodeAddrs {
			fmt.Fprintln(w, a)
		}
	} else if left := nodePortNames(cfg); len(left) > 0 {
		fmt.Fprintf(w, "\n# node addresses (NodePort-like services): none; no address of this box is in node_cidrs %v,\n"+
			"# so the node ports of %s are left out (their VIPs, if any, are above)\n", dp.NodeCIDRs, strings.Join(left, ", "))
	}
	fmt.Fprintf(w, "\n# ipsets (ipset restore)\n")
	sets := st.SetEntries()
	for _, spec := range SetSpecs() {
		fam := "inet"
		if spec.Family == 6 {
			fam = "inet6"
		}
		if spec.SkbInfo {
			fam += " skbinfo"
		}
		fmt.Fprintf(w, "create %s %s family %s\n", spec.Name, spec.Type, fam)
		for _, e := range slices.SortedFunc(slices.Values(sets[spec.Name]), SetEntry.Compare) {
			fmt.Fprintf(w, "add %s %s\n", spec.Name, e)
		}
	}
	for _, fam := range []int{4, 6} {
		tool := FilterTool(fam)
		fmt.Fprintf(w, "\n# %s (%s-restore --noflush)\n", tool, tool)
		for _, t := range TablesFor(cfg, fam) {
			io.WriteString(w, RestoreInput(t))
			for _, j := range t.Jumps {
				pos := "-A " + j.From
				if j.First {
					pos = "-I " + j.From + " 1"
				}
				fmt.Fprintf(w, "# jump: %s %s\n", pos, j.Rule())
			}
		}
	}
	for iface, vips := range st.Announce {
		fmt.Fprintf(w, "\n# ARP answered on %s for %v\n", iface, vips)
	}
	return nil
}

// nodePortNames lists the services with a node port.
func nodePortNames(cfg *config.Config) []string {
	var names []string
	for i := range cfg.Services {
		if cfg.Services[i].NodePort != 0 {
			names = append(names, cfg.Services[i].Name)
		}
	}
	return names
}
