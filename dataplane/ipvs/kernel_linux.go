package ipvs

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	mobyipvs "github.com/moby/ipvs"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/lvs"
)

// procIPVS lists every virtual server and destination of the reader's
// network namespace in one read.
const procIPVS = "/proc/net/ip_vs"

// flagHashed is set by the kernel on every virtual server; it is not lbd's.
const flagHashed = 0x2

// NetlinkKernel is the kernel's IPVS table, written through generic
// netlink (github.com/moby/ipvs) in the caller's network namespace.
type NetlinkKernel struct {
	h *mobyipvs.Handle

	// The IPVS generic-netlink family id, for AddServices' own sockets
	// (batch_linux.go), looked up on first use.
	familyOnce sync.Once
	family     uint16
	familyErr  error
}

var _ Kernel = (*NetlinkKernel)(nil)

// ErrNoIPVS says the kernel has no IPVS; moby/ipvs would otherwise fail
// silently (writes do nothing, dumps return nothing).
var ErrNoIPVS = errors.New("the kernel has no IPVS: load the ip_vs module (modprobe ip_vs) and the ip_vs_* scheduler modules")

// Available reports whether IPVS is loaded in this network namespace.
func Available() error { return available(procIPVS) }

// available is Available with the proc file as a parameter, for tests.
func available(proc string) error {
	if _, err := os.Stat(proc); err != nil {
		return fmt.Errorf("%w (%s: %v)", ErrNoIPVS, proc, err)
	}
	return nil
}

// schedulerError explains the kernel's ENOENT to adding or editing a
// virtual server: ip_vs_add_service and ip_vs_edit_service (Linux
// net/netfilter/ipvs/ip_vs_ctl.c) answer it when the scheduler's module
// ip_vs_<name> is not loaded and request_module could not load it, and
// the bare errno names no module. (A missing persistence engine also
// answers ENOENT; lbd sets none.) Other errors are returned as they are;
// errors.Is(err, syscall.ENOENT) stays true.
func schedulerError(sched string, err error) error {
	if sched == "" || !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return fmt.Errorf("scheduler %q is not available in the kernel: load module ip_vs_%s (modprobe ip_vs_%s): %w", sched, sched, sched, err)
}

// OpenKernel opens IPVS in the current network namespace.
func OpenKernel() (*NetlinkKernel, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	h, err := mobyipvs.New("")
	if err != nil {
		return nil, fmt.Errorf("opening IPVS netlink socket: %w", err)
	}
	return &NetlinkKernel{h: h}, nil
}

// Close releases the netlink socket.
func (k *NetlinkKernel) Close() { k.h.Close() }

// Dump reads the virtual servers through one netlink dump and all their
// destinations through one read of /proc/net/ip_vs (netlink would need one
// request per virtual server).
func (k *NetlinkKernel) Dump() ([]Service, error) {
	svcs, err := k.h.GetServices()
	if err != nil {
		return nil, fmt.Errorf("listing virtual servers: %w", err)
	}
	f, err := os.Open(procIPVS)
	if err != nil {
		return nil, fmt.Errorf("listing destinations: %w", err)
	}
	defer f.Close()
	dests, err := parseProcIPVS(f)
	if err != nil {
		return nil, fmt.Errorf("listing destinations: %s: %w", procIPVS, err)
	}
	out := make([]Service, 0, len(svcs))
	tr := &tunnelReader{k: k}
	defer tr.close()
	for _, s := range svcs {
		key, err := keyOf(s)
		if err != nil {
			return nil, err
		}
		d, inProc := dests[key]
		if key.IsFWMark() || !inProc {
			// /proc names a firewall-mark service by its mark alone, not
			// its family; and its read, in chunks, can skip services when
			// other network namespaces hold IPVS services too (6.1 resumes
			// each chunk by a position counted over every namespace's).
			// Ask netlink for those: they are few.
			d, err = k.netlinkDests(s)
			switch {
			case errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENOENT):
				continue // deleted since it was listed
			case err != nil:
				return nil, fmt.Errorf("listing destinations of %s: %w", key, err)
			}
		}
		switch err := tr.fill(key, d); {
		case errors.Is(err, syscall.ESRCH) || errors.Is(err, syscall.ENOENT):
			continue // deleted since it was listed
		case err != nil:
			return nil, fmt.Errorf("reading the tunnels of %s: %w", key, err)
		}
		out = append(out, Service{
			Key:       key,
			Scheduler: s.SchedName,
			Flags:     s.Flags &^ flagHashed,
			Timeout:   s.Timeout,
			Netmask:   s.Netmask,
			Dests:     d,
		})
	}
	return out, nil
}

// netlinkDests reads the destinations of one service over netlink.
func (k *NetlinkKernel) netlinkDests(s *mobyipvs.Service) ([]Dest, error) {
	ds, err := k.h.GetDestinations(s)
	if err != nil {
		return nil, err
	}
	out := make([]Dest, 0, len(ds))
	for _, d := range ds {
		a, ok := netip.AddrFromSlice(d.Address)
		if !ok {
			return nil, fmt.Errorf("destination with unreadable address %v", d.Address)
		}
		if d.AddressFamily == syscall.AF_INET {
			a = a.Unmap()
		}
		out = append(out, Dest{Addr: netip.AddrPortFrom(a, d.Port), Weight: d.Weight, Forward: forwardOf(d.ConnectionFlags),
			ActiveConns: d.ActiveConnections, InactiveConns: d.InactiveConnections})
	}
	slices.SortFunc(out, func(a, b Dest) int { return a.Addr.Compare(b.Addr) })
	return out, nil
}

func keyOf(s *mobyipvs.Service) (lvs.Key, error) {
	if s.FWMark != 0 {
		f := lvs.IPv4
		if s.AddressFamily == syscall.AF_INET6 {
			f = lvs.IPv6
		}
		return lvs.FWMarkKey(s.FWMark, f), nil
	}
	addr, ok := netip.AddrFromSlice(s.Address)
	if !ok {
		return lvs.Key{}, fmt.Errorf("virtual server with unreadable address %v", s.Address)
	}
	proto, known := lvs.ProtocolOf(uint8(s.Protocol))
	if !known || s.Protocol > 0xff {
		// Not lbd's (a DCCP one, say): a key no service of lbd's has.
		proto = lvs.Protocol(fmt.Sprintf("proto-%d", s.Protocol))
	}
	if s.AddressFamily == syscall.AF_INET {
		addr = addr.Unmap()
		if addr.Is6() { // moby/ipvs may return 16 bytes for IPv4
			addr = netip.AddrFrom4([4]byte(s.Address.To4()))
		}
	}
	return lvs.Key{Addr: addr, Port: s.Port, Protocol: proto}, nil
}

func toMoby(s Service) *mobyipvs.Service {
	m := &mobyipvs.Service{
		Address:       net.IP(s.Key.Addr.AsSlice()),
		Port:          s.Key.Port,
		FWMark:        s.Key.FWMark, // moby then sends the mark instead of the address
		SchedName:     s.Scheduler,
		Flags:         s.Flags,
		Timeout:       s.Timeout,
		Netmask:       s.Netmask,
		AddressFamily: syscall.AF_INET,
		Protocol:      ipvsProtocol(s.Key),
	}
	if s.Key.Family() == lvs.IPv6 {
		m.AddressFamily = syscall.AF_INET6
	}
	return m
}

// toMobyDest converts a destination for moby/ipvs, which cannot express
// a tunnel's encapsulation: IPIP only (the others go by writeTunnelDest).
func toMobyDest(d Dest) *mobyipvs.Destination {
	m := &mobyipvs.Destination{
		Address:         net.IP(d.Addr.Addr().AsSlice()),
		Port:            d.Addr.Port(),
		Weight:          d.Weight,
		ConnectionFlags: connFlag(d.Forward.Method),
		AddressFamily:   syscall.AF_INET,
	}
	if d.Addr.Addr().Is6() {
		m.AddressFamily = syscall.AF_INET6
	}
	return m
}

func keyService(k lvs.Key) *mobyipvs.Service {
	return toMoby(Service{Key: k})
}

func (k *NetlinkKernel) AddService(s Service) error {
	return schedulerError(s.Scheduler, k.h.NewService(toMoby(s)))
}

func (k *NetlinkKernel) UpdateService(s Service) error {
	return schedulerError(s.Scheduler, k.h.UpdateService(toMoby(s)))
}

func (k *NetlinkKernel) DeleteService(key lvs.Key) error {
	return k.h.DelService(keyService(key))
}

func (k *NetlinkKernel) AddDest(key lvs.Key, d Dest) error {
	if !plainTunnel(d) {
		return k.writeTunnelDest(ipvsCmdNewDest, key, d)
	}
	return k.h.NewDestination(keyService(key), toMobyDest(d))
}

func (k *NetlinkKernel) UpdateDest(key lvs.Key, d Dest) error {
	if !plainTunnel(d) {
		return k.writeTunnelDest(ipvsCmdSetDest, key, d)
	}
	return k.h.UpdateDestination(keyService(key), toMobyDest(d))
}

func (k *NetlinkKernel) DeleteDest(key lvs.Key, addr netip.AddrPort) error {
	return k.h.DelDestination(keyService(key), toMobyDest(Dest{Addr: addr}))
}

// parseProcIPVS reads /proc/net/ip_vs: destinations by virtual server. A
// virtual server listed without destinations maps to nil; one a chunked
// read shows twice keeps its first block; one it skipped is absent.
//
//	TCP  C000020A:0050 wrr
//	  -> 0A00000B:1F90      Masq    3      0          0
//	TCP  [2001:0db8:0000:0000:0000:0000:0000:0010]:01BB rr persistent 10800
//
// ProcConns reads every destination with its connection counts from
// /proc/net/ip_vs, without the netlink handle: safe while a sync runs.
func ProcConns() (map[lvs.Key][]Dest, error) {
	f, err := os.Open(procIPVS)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcIPVS(f)
}

func parseProcIPVS(r io.Reader) (map[lvs.Key][]Dest, error) {
	out := map[lvs.Key][]Dest{}
	var cur *lvs.Key
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		switch {
		case n <= 3 || len(fields) == 0:
			continue // headers
		case fields[0] == "->":
			if cur == nil || len(fields) < 6 {
				continue // a destination of a fwmark service
			}
			ap, err := parseHexAddrPort(fields[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			w, err1 := strconv.Atoi(fields[3])
			act, err2 := strconv.Atoi(fields[4])
			inact, err3 := strconv.Atoi(fields[5])
			if err := errors.Join(err1, err2, err3); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			out[*cur] = append(out[*cur], Dest{Addr: ap, Weight: w, Forward: procForward(fields[2]), ActiveConns: act, InactiveConns: inact})
		case procProtocol(fields[0]) != "":
			if len(fields) < 2 {
				return nil, fmt.Errorf("line %d: short line %q", n, sc.Text())
			}
			ap, err := parseHexAddrPort(fields[1])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			k := lvs.Key{Addr: ap.Addr(), Port: ap.Port(), Protocol: procProtocol(fields[0])}
			cur = &k
			if _, seen := out[k]; seen {
				cur = nil // shown twice by a chunked read: keep the first
				continue
			}
			out[k] = nil // listed, even without destinations
		default: // FWM (listed by mark alone), or a protocol lbd does not serve
			cur = nil
		}
	}
	return out, sc.Err()
}

// procProtocol reads /proc/net/ip_vs's protocol column (the kernel's
// ip_vs_proto_name: "TCP", "UDP", "SCTP"); "" for one lbd does not serve.
func procProtocol(col string) lvs.Protocol {
	p, _ := lvs.ParseProtocol(strings.ToLower(col))
	return p
}

// ipvsProtocol is the protocol number IPVS keys k's virtual server by
// (TCP for a key without one: a firewall-mark key, which the kernel
// keys by its mark instead).
func ipvsProtocol(k lvs.Key) uint16 {
	if n := k.Protocol.Number(); n != 0 {
		return uint16(n)
	}
	return syscall.IPPROTO_TCP
}

// procForward reads /proc/net/ip_vs's forwarding column. It does not show
// a tunnel's encapsulation: a tunnel reads as IPIP.
func procForward(col string) lvs.Forward {
	switch col {
	case "Route":
		return lvs.Forward{Method: lvs.DR}
	case "Tunnel":
		return lvs.Forward{Method: lvs.Tunnel}
	}
	return lvs.Forward{}
}

// forwardOf reads a destination's forwarding method from its connection
// flags (moby/ipvs reads no tunnel attributes: a tunnel reads as IPIP).
func forwardOf(flags uint32) lvs.Forward {
	switch flags & mobyipvs.ConnectionFlagFwdMask {
	case mobyipvs.ConnectionFlagDirectRoute:
		return lvs.Forward{Method: lvs.DR}
	case mobyipvs.ConnectionFlagTunnel:
		return lvs.Forward{Method: lvs.Tunnel}
	}
	return lvs.Forward{}
}

// parseHexAddrPort parses "C000020A:0050" or "[2001:0db8:...]:01BB".
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	port, err := strconv.ParseUint(s[i+1:], 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q", s)
	}
	host := s[:i]
	if strings.HasPrefix(host, "[") {
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
		}
		return netip.AddrPortFrom(a, uint16(port)), nil
	}
	v, err := strconv.ParseUint(host, 16, 32)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad address %q", s)
	}
	a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// EnsureTimeouts sets IPVS's global connection timeouts where t has a
// non-zero value that differs from the kernel's; it reports whether it
// wrote.
func (k *NetlinkKernel) EnsureTimeouts(t desired.Timeouts) (bool, error) {
	cur, err := k.h.GetConfig()
	if err != nil {
		return false, fmt.Errorf("reading IPVS timeouts: %w", err)
	}
	want := *cur
	if t.TCP != 0 {
		want.TimeoutTCP = t.TCP
	}
	if t.TCPFin != 0 {
		want.TimeoutTCPFin = t.TCPFin
	}
	if t.UDP != 0 {
		want.TimeoutUDP = t.UDP
	}
	if want == *cur {
		return false, nil
	}
	if err := k.h.SetConfig(&want); err != nil {
		return false, fmt.Errorf("setting IPVS timeouts (tcp %s, tcpfin %s, udp %s): %w", want.TimeoutTCP, want.TimeoutTCPFin, want.TimeoutUDP, err)
	}
	return true, nil
}
