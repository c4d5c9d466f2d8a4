package desired

import (
	"fmt"
	"io"
	"strings"

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
			fmt.Fprintf(&b, "-a %s -r %s -m -w %d\n", serviceFlag(s.Key), d.Addr, d.Weight)
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
	opt := "-t"
	if k.Protocol == lvs.UDP {
		opt = "-u"
	}
	return fmt.Sprintf("%s %s", opt, netipAddrPort(k))
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
