package ipvs

// Tunnel destinations: moby/ipvs can neither write a GUE or GRE
// destination (it has no tunnel attributes) nor read any tunnel's
// encapsulation back (/proc/net/ip_vs shows every one as "Tunnel"), so
// lbd does both over its own generic-netlink socket, with the encoding
// of the batch writer.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/lbdproject/lbd/dataplane/genl"
	"github.com/lbdproject/lbd/lvs"
	"golang.org/x/sys/unix"
)

const (
	ipvsCmdSetDest = 6
	ipvsCmdGetDest = 8
)

// plainTunnel reports whether moby/ipvs can write d: anything but a GUE
// or GRE tunnel (IPIP is the kernel's default encapsulation).
func plainTunnel(d Dest) bool {
	return d.Forward.Method != lvs.Tunnel || d.Forward == lvs.Forward{Method: lvs.Tunnel}
}

// writeTunnelDest creates (ipvsCmdNewDest) or edits (ipvsCmdSetDest) one
// destination of key, with its encapsulation, and waits for the kernel's
// answer.
func (k *NetlinkKernel) writeTunnelDest(cmd uint8, key lvs.Key, d Dest) error {
	w, err := k.tunnelSocket()
	if err != nil {
		return err
	}
	defer w.close()
	w.seq++
	encodeDest(w, cmd, &Service{Key: key}, &d, unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	defer w.Reset()
	if err := w.conn.Send(w.Encoded()); err != nil {
		return err
	}
	return w.conn.ReadAck(w.seq)
}

func (k *NetlinkKernel) tunnelSocket() (*batchWriter, error) {
	family, err := k.ipvsFamily()
	if err != nil {
		return nil, fmt.Errorf("IPVS generic netlink family: %w", err)
	}
	return newBatchWriter(family)
}

// tunnelReader reads the encapsulation of tunnel destinations, one
// GET_DEST dump per virtual server, on one socket for a whole Dump.
type tunnelReader struct {
	k *NetlinkKernel
	w *batchWriter // opened at the first use
}

func (r *tunnelReader) close() {
	if r.w != nil {
		r.w.close()
	}
}

// fill sets the Forward of ds's tunnel destinations from the kernel; a
// service without any is not asked about.
func (r *tunnelReader) fill(key lvs.Key, ds []Dest) error {
	tunnels := false
	for _, d := range ds {
		tunnels = tunnels || d.Forward.Method == lvs.Tunnel
	}
	if !tunnels {
		return nil
	}
	if r.w == nil {
		w, err := r.k.tunnelSocket()
		if err != nil {
			return err
		}
		r.w = w
	}
	var fwd map[netip.AddrPort]lvs.Forward
	err := genl.RetryDump(genl.ErrDumpInterrupted, func() error {
		var err error
		fwd, err = r.dump(key)
		return err
	})
	if err != nil {
		return err
	}
	for i, d := range ds {
		if f, ok := fwd[d.Addr]; ok {
			ds[i].Forward = f
		}
	}
	return nil
}

// dump runs one GET_DEST dump of key and returns each destination's
// forwarding.
func (r *tunnelReader) dump(key lvs.Key) (map[netip.AddrPort]lvs.Forward, error) {
	w := r.w
	w.seq++
	start := w.Begin(w.family, unix.NLM_F_REQUEST|unix.NLM_F_DUMP, w.seq, ipvsCmdGetDest, ipvsGenlVersion)
	nest := w.BeginNested(ipvsCmdAttrService)
	w.serviceKey(&Service{Key: key})
	w.EndNested(nest)
	w.End(start)
	err := w.conn.Send(w.Encoded())
	w.Reset()
	if err != nil {
		return nil, err
	}
	out := map[netip.AddrPort]lvs.Forward{}
	err = w.conn.ReadDump(w.seq, w.family, func(m genl.Message) error {
		addr, f, err := decodeDestMessage(m.Payload)
		if err == nil {
			out[addr] = f
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// decodeDestMessage reads a destination's address and forwarding from a
// GET_DEST dump message (the generic netlink header, then
// IPVS_CMD_ATTR_DEST).
func decodeDestMessage(payload []byte) (netip.AddrPort, lvs.Forward, error) {
	if len(payload) < genl.HeaderLen {
		return netip.AddrPort{}, lvs.Forward{}, fmt.Errorf("short destination message (%d bytes)", len(payload))
	}
	for typ, v := range genl.Attrs(payload[genl.HeaderLen:]) {
		if typ == ipvsCmdAttrDest {
			return decodeDest(v)
		}
	}
	return netip.AddrPort{}, lvs.Forward{}, errors.New("destination message without a destination")
}

// decodeDest reads the attributes nested in IPVS_CMD_ATTR_DEST. The
// address is the kernel's 16-byte union: its first 4 bytes for IPv4.
func decodeDest(b []byte) (netip.AddrPort, lvs.Forward, error) {
	var raw []byte
	var port uint16
	var af uint16 = unix.AF_INET
	var f lvs.Forward
	ne := binary.NativeEndian
	for typ, v := range genl.Attrs(b) {
		switch {
		case typ == ipvsDestAttrAddress:
			raw = v
		case typ == ipvsDestAttrPort && len(v) >= 2:
			port = binary.BigEndian.Uint16(v)
		case typ == ipvsDestAttrAddressFamily && len(v) >= 2:
			af = ne.Uint16(v)
		case typ == ipvsDestAttrForwardingMethod && len(v) >= 4:
			f.Method = methodOf(ne.Uint32(v) & 7)
		case typ == ipvsDestAttrTunType && len(v) >= 1:
			f.Tunnel = lvs.Encap(v[0])
		case typ == ipvsDestAttrTunPort && len(v) >= 2:
			f.Port = binary.BigEndian.Uint16(v)
		case typ == ipvsDestAttrTunFlags && len(v) >= 2:
			f.Checksum = lvs.Checksum(ne.Uint16(v) & 3)
		}
	}
	var a netip.Addr
	switch {
	case af == unix.AF_INET && len(raw) >= 4:
		a = netip.AddrFrom4([4]byte(raw[:4]))
	case af == unix.AF_INET6 && len(raw) >= 16:
		a = netip.AddrFrom16([16]byte(raw[:16]))
	default:
		return netip.AddrPort{}, lvs.Forward{}, fmt.Errorf("destination with unreadable address (family %d, %d bytes)", af, len(raw))
	}
	if f.Method != lvs.Tunnel {
		f = lvs.Forward{Method: f.Method}
	} else if f.Tunnel != lvs.GUE {
		f.Port = 0
	}
	return netip.AddrPortFrom(a, port), f, nil
}

// methodOf is connFlag's inverse; an unknown method reads as NAT.
func methodOf(flag uint32) lvs.Method {
	switch flag {
	case ipvsConnFlagDRoute:
		return lvs.DR
	case ipvsConnFlagTunnel:
		return lvs.Tunnel
	}
	return lvs.NAT
}
