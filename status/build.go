package status

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/lbdproject/lbd/dataplane"
	"github.com/lbdproject/lbd/dataplane/announce"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/discovery/file"
	"github.com/lbdproject/lbd/healthcheck"
	"github.com/lbdproject/lbd/lvs"
)

// Build assembles a Snapshot from the configuration source's status, the
// dataplane's view and the ARP announcer's status.
func Build(version string, now time.Time, cfg file.Status, v dataplane.View, ann []announce.InterfaceStatus, health map[lvs.HealthKey]healthcheck.Status) Snapshot {
	s := Snapshot{
		Version: version,
		Time:    now,
		Config: Config{
			Path:   cfg.Path,
			Files:  cfg.Files,
			Loaded: cfg.Loaded,
			Hash:   cfg.Hash,
		},
		Sync: Sync{
			Time:     v.Last.Start,
			Reason:   v.Last.Reason.String(),
			Duration: v.Last.Duration,
			Writes:   v.Last.Writes,
			Dumps:    v.Last.Dumps,
			Held:     v.Last.Held.String(),
			Waiting:  v.Last.Waiting,
		},
		Services: []Service{},
	}
	if cfg.Err != nil {
		s.Config.Error, s.Config.ErrorTime = cfg.Err.Error(), cfg.ErrTime
	}
	if v.Last.Err != nil {
		s.Sync.Error = v.Last.Err.Error()
	}
	for _, d := range v.Desired.SyncDaemons {
		d = d.Resolved()
		s.IPVSSync = append(s.IPVSSync, SyncDaemon{Role: d.Role.String(), Interface: d.Interface, SyncID: int(d.SyncID),
			Group: d.Group.String(), Port: int(d.Port), TTL: int(d.TTL), MaxLen: int(d.MaxLen)})
	}
	for _, svc := range v.Desired.Services {
		s.Services = append(s.Services, service(svc, v.Kernel[svc.Key], health))
	}
	for _, a := range ann {
		out := Announce{Interface: a.Interface, MAC: a.HardwareAddr.String(), State: a.State.String()}
		for _, v := range a.VIPs {
			out.VIPs = append(out.VIPs, v.String())
		}
		if a.Err != nil {
			out.Error = a.Err.Error()
		}
		s.Announce = append(s.Announce, out)
	}
	return s
}

func service(svc desired.Service, kernel map[netip.AddrPort]int, health map[lvs.HealthKey]healthcheck.Status) Service {
	out := Service{
		Name:          svc.Name,
		VirtualServer: svc.Key.String(),
		Forward:       methodWord(svc.Method),
		Scheduler:     svc.Scheduler,
		Source:        svc.Source.String(),
		RealServers:   []RealServer{},
	}
	if svc.Flags&desired.FlagPersistent != 0 {
		out.Persistence = fmt.Sprintf("persistent %ds", svc.Timeout)
	}
	seen := map[netip.AddrPort]bool{}
	for _, d := range svc.Dests {
		seen[d.Addr] = true
		out.RealServers = append(out.RealServers, RealServer{
			Address:      d.Addr.String(),
			Source:       d.Source().String(),
			Forward:      ForwardText(d.Forward()),
			ConfigWeight: d.ConfigWeight(),
			Weight:       d.Weight,
			KernelWeight: weightIn(kernel, d.Addr),
			Health:       healthOf(health, svc.Name, d.Addr),
		})
	}
	// Destinations the kernel still holds but the desired state dropped:
	// draining until their connections end.
	for _, addr := range slices.SortedFunc(maps.Keys(kernel), netip.AddrPort.Compare) {
		if !seen[addr] {
			out.RealServers = append(out.RealServers, RealServer{
				Address:      addr.String(),
				Source:       "draining: no longer desired",
				KernelWeight: weightIn(kernel, addr),
			})
		}
	}
	return out
}

func weightIn(kernel map[netip.AddrPort]int, addr netip.AddrPort) *int {
	w, ok := kernel[addr]
	if !ok {
		return nil
	}
	return &w
}

func healthOf(health map[lvs.HealthKey]healthcheck.Status, service string, addr netip.AddrPort) *Health {
	st, ok := health[lvs.HealthKey{Service: service, Addr: addr}]
	if !ok {
		return nil
	}
	return &Health{
		Check: string(st.Type), Target: st.Target.String(), Healthy: st.Healthy, Since: st.Since,
		LastCheck: st.LastCheck, LastError: st.LastError,
	}
}

// methodWord is how the configuration writes a forwarding method.
func methodWord(m lvs.Method) string {
	if m == lvs.Tunnel {
		return "tun"
	}
	return m.String() // nat, dr
}

// ForwardText renders a real server's forwarding method as status shows
// it: "" for NAT, "dr", "tun ipip", "tun gue:6080", "tun gue:6080 csum",
// "tun gre remcsum" (ipvsadm's --tun-csum, --tun-remcsum).
func ForwardText(f lvs.Forward) string {
	switch f.Method {
	case lvs.NAT:
		return ""
	case lvs.DR:
		return "dr"
	}
	out := "tun " + f.String() // ipip, gue:PORT, gre
	switch {
	case f.Tunnel == lvs.IPIP:
	case f.Checksum == lvs.Checksummed:
		out += " csum"
	case f.Checksum == lvs.RemoteChecksum:
		out += " remcsum"
	}
	return out
}
