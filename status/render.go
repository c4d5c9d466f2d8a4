package status

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteText renders s for people: a summary, then an ipvsadm -Ln-like table
// with configured, desired and kernel weights and where each piece comes
// from.
func WriteText(w io.Writer, s Snapshot) error {
	var b strings.Builder
	fmt.Fprintf(&b, "lbd %s\n", s.Version)
	switch {
	case s.Config.Hash != "":
		fmt.Fprintf(&b, "config: %s (%d files, hash %s, loaded %s)\n", s.Config.Path, len(s.Config.Files), s.Config.Hash, ago(s.Time, s.Config.Loaded))
		if s.Config.Error != "" {
			fmt.Fprintf(&b, "config REJECTED %s; the configuration above stays in force:\n", ago(s.Time, s.Config.ErrorTime))
		}
	case s.Config.Error != "":
		fmt.Fprintf(&b, "config: %s is INVALID (%s); nothing is applied and the kernel is left as it was until a valid edit:\n", s.Config.Path, ago(s.Time, s.Config.ErrorTime))
	default:
		fmt.Fprintf(&b, "config: %s: not loaded yet\n", s.Config.Path)
	}
	if s.Config.Error != "" {
		for _, l := range strings.Split(s.Config.Error, "\n") {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	switch {
	case s.Sync.Time.IsZero():
		b.WriteString("sync: none yet\n")
	case s.Sync.Waiting:
		b.WriteString("sync: waiting for every source's first snapshot\n")
	default:
		result := "ok"
		if s.Sync.Error != "" {
			result = "FAILED: " + s.Sync.Error
		}
		fmt.Fprintf(&b, "sync: %s (%s, %s, %d writes, %d dumps): %s\n", ago(s.Time, s.Sync.Time), s.Sync.Reason, s.Sync.Duration.Round(time.Microsecond), s.Sync.Writes, s.Sync.Dumps, result)
	}
	if s.Sync.Held != "" {
		fmt.Fprintf(&b, "deletions HELD by the safety valve (other changes applied): %s\n", s.Sync.Held)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIRTUAL SERVER / REAL SERVER\tFORWARD\tSCHED\tCONFIG\tDESIRED\tKERNEL\tACTIVE\tINACT\tHEALTH\tSOURCE")
	for _, svc := range s.Services {
		sched := svc.Scheduler
		if svc.Persistence != "" {
			sched += " " + svc.Persistence
		}
		fmt.Fprintf(tw, "%s (%s)\t%s\t%s\t\t\t\t\t\t\t%s\n", svc.VirtualServer, svc.Name, svc.Forward, sched, svc.Source)
		for _, r := range svc.RealServers {
			kernel := "-"
			if r.KernelWeight != nil {
				kernel = strconv.Itoa(*r.KernelWeight)
			}
			fmt.Fprintf(tw, "  -> %s\t%s\t\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Address, r.Forward, r.ConfigWeight, r.Weight, kernel, count(r.ActiveConns), count(r.InactiveConns), health(s.Time, r.Health), r.Source)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	writeProblems(&b, s.Problems)
	writeConsul(&b, s.Time, s.Consul)
	writeVRRP(&b, s.Time, s.VRRP, s.VRRPError)
	writeSync(&b, s.IPVSSync)
	writeConntrackd(&b, s.Time, s.Conntrackd)
	for _, a := range s.Announce {
		fmt.Fprintf(&b, "\nARP/NDP on %s (%s): %s for %s", a.Interface, a.MAC, a.State, strings.Join(a.VIPs, " "))
		if a.Error != "" {
			fmt.Fprintf(&b, ": %s", a.Error)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func count(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("%s ago", now.Sub(t).Round(time.Second))
}

// health renders a real server's check state: "up 3m", "DOWN 10s (connection refused)", or "-".
func health(now time.Time, h *Health) string {
	if h == nil {
		return "-"
	}
	state := "up"
	if !h.Healthy {
		state = "DOWN"
	}
	out := fmt.Sprintf("%s %s %s", h.Check, state, now.Sub(h.Since).Round(time.Second))
	if h.LastError != "" {
		out += " (" + h.LastError + ")"
	}
	return out
}

func writeProblems(b *strings.Builder, ps []Problem) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintf(b, "\nproblems (%d), none refused or drained:\n", len(ps))
	for _, p := range ps {
		fmt.Fprintf(b, "  %s: %s\n", p.Source, p.Message)
	}
}

func writeConsul(b *strings.Builder, now time.Time, c *Consul) {
	if c == nil {
		return
	}
	switch {
	case !c.Connected && c.LastContact.IsZero():
		fmt.Fprintf(b, "\nconsul: NOT REACHED yet: %s\n", c.Error)
	case !c.Connected:
		fmt.Fprintf(b, "\nconsul: UNREACHABLE (last answer %s): %s; what came from Consul stays as last known\n", ago(now, c.LastContact), c.Error)
	default:
		fmt.Fprintf(b, "\nconsul: connected (last answer %s), %d services followed, %d tagged, %d requests, %d failed\n", ago(now, c.LastContact), c.Queries, c.Tagged, c.Requests, c.Errors)
	}
	if c.Connected && c.Error != "" {
		fmt.Fprintf(b, "  %s\n", c.Error)
	}
	if len(c.Problems) > 0 {
		fmt.Fprintf(b, "consul registrations refused (%d):\n", len(c.Problems))
		for _, p := range c.Problems {
			fmt.Fprintf(b, "  %s\n", p)
		}
	}
	for _, r := range c.Registrations {
		state := "passing"
		if !r.Healthy {
			state = "critical"
		}
		fmt.Fprintf(b, "registered in consul: %s %s (%s) %s", r.Name, r.Address, r.ID, state)
		if r.Error != "" {
			fmt.Fprintf(b, ": %s", r.Error)
		}
		b.WriteString("\n")
	}
}

func writeVRRP(b *strings.Builder, now time.Time, vs []VRRP, why string) {
	if why != "" {
		fmt.Fprintf(b, "\nvrrp: NOT RUNNING, this box holds none of the pair's addresses: %s\n", why)
	}
	for _, v := range vs {
		group := ""
		if v.Group != "" {
			group = " (group " + v.Group + ")"
		}
		state := v.State
		if v.Holding {
			state += " (still holding the addresses until the new master has advertised twice)"
		}
		fmt.Fprintf(b, "\nvrrp %s%s on %s IPv%d, VRID %d, version %d, priority %d: %s for %s, %d transitions\n",
			v.Name, group, v.Interface, v.Family, v.VRID, v.Version, v.Priority, state, strings.TrimSuffix(ago(now, v.Since), " ago"), v.Transitions)
		master := "none heard"
		if v.Master != "" {
			master = fmt.Sprintf("%s (priority %d)", v.Master, v.MasterPriority)
		}
		fmt.Fprintf(b, "  master: %s; adverts sent %d, received %d", master, v.Sent, v.Received)
		if v.SendErrors > 0 {
			fmt.Fprintf(b, ", send errors %d", v.SendErrors)
		}
		for _, reason := range slices.Sorted(maps.Keys(v.Refused)) {
			fmt.Fprintf(b, ", refused (%s) %d", reason, v.Refused[reason])
		}
		b.WriteString("\n")
	}
}

func writeSync(b *strings.Builder, ds []SyncDaemon) {
	if len(ds) > 0 {
		b.WriteString("\nipvs connection sync (running unless the sync above failed):\n")
	}
	for _, d := range ds {
		maxLen := "from the MTU"
		if d.MaxLen != 0 {
			maxLen = strconv.Itoa(d.MaxLen)
		}
		fmt.Fprintf(b, "  %s on %s: id %d, group %s port %d ttl %d, max length %s\n", d.Role, d.Interface, d.SyncID, d.Group, d.Port, d.TTL, maxLen)
	}
}

func writeConntrackd(b *strings.Builder, now time.Time, c *Conntrackd) {
	if c == nil {
		return
	}
	b.WriteString("\nconntrackd (replicates masqueraded connections):\n")
	switch {
	case c.Running:
		fmt.Fprintf(b, "  running, pid %d, for %s", c.PID, now.Sub(c.Since).Round(time.Second))
	case c.Waiting != "":
		fmt.Fprintf(b, "  NOT STARTED: %s", c.Waiting)
	default:
		fmt.Fprintf(b, "  NOT RUNNING (last exit: %s)", c.LastExit)
	}
	fmt.Fprintf(b, "; restarts %d\n", c.Restarts)
	if c.LastCommand != "" {
		result := "ok"
		if c.LastCommandError != "" {
			result = "FAILED: " + c.LastCommandError
		}
		fmt.Fprintf(b, "  last transition: %s %s ago, %s\n", c.LastCommand, now.Sub(c.LastCommandAt).Round(time.Second), result)
	}
}
