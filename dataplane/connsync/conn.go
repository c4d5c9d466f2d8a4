// Package connsync sends the connections of the local IPVS table to the
// peer's backup sync daemon, on demand, in the kernel's own sync protocol
// (version 1). It closes two gaps of the kernel's master daemon: it holds
// its messages for up to two seconds before sending them (so a planned
// handover loses the youngest connections), and it has no bulk resync (a
// box that comes back never hears of the idle connections its peer
// forwards).
//
// The table is read from /proc/net/ip_vs_conn (Reader, OpenTable), the
// only place the kernel lists it: the IPVS netlink family has no
// connection dump. The file does not show a connection's flags, firewall
// mark or timeout, so the caller says, per virtual service, how it
// forwards and what its persistence timeout is (Services).
//
// wire.go says what the receiving kernel checks in a message and does
// with it (net/netfilter/ipvs/ip_vs_sync.c, ip_vs_conn.c, ip_vs_ctl.c).
package connsync

import (
	"fmt"
	"net/netip"
	"time"
)

// Protocol is an IP protocol number, as the kernel's connection entries
// carry it.
type Protocol uint8

const (
	// ProtoIP is the protocol of a firewall-mark service's persistence
	// template (IPPROTO_IP): the template stands for every protocol.
	ProtoIP   Protocol = 0
	ProtoTCP  Protocol = 6
	ProtoUDP  Protocol = 17
	ProtoSCTP Protocol = 132
)

// String names p as /proc/net/ip_vs_conn does (ip_vs_proto_name).
func (p Protocol) String() string {
	switch p {
	case ProtoIP:
		return "IP"
	case ProtoTCP:
		return "TCP"
	case ProtoUDP:
		return "UDP"
	case ProtoSCTP:
		return "SCTP"
	case 1:
		return "ICMP"
	case 58:
		return "ICMPv6"
	}
	return fmt.Sprintf("IP_%d", uint8(p))
}

// State is a connection's state as the kernel numbers it for its protocol
// (IP_VS_TCP_S_*, IP_VS_UDP_S_*, IP_VS_SCTP_S_*), or a template's
// (IP_VS_CTPL_S_*).
type State uint16

// StateUnknown is the state of an entry of a protocol whose states lbd
// does not know (IPVS's AH and ESP services): such entries are not sent.
const StateUnknown State = 0xffff

// The kernel's state names, indexed by number (include/net/ip_vs.h;
// ip_vs_proto_tcp.c, _udp.c, _sctp.c; ip_vs_proto.c for templates).
var (
	tcpStates = []string{"NONE", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT",
		"TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "SYNACK"}
	udpStates  = []string{"UDP"}
	sctpStates = []string{"NONE", "INIT1", "INIT", "C-SENT", "C-REPLIED", "C-WAIT",
		"COOKIE", "C-ECHOED", "ESTABLISHED", "S-SENT", "S-RECEIVED", "S-ACK-SENT", "REJECTED", "CLOSED"}
	templateStates = []string{"NONE", "ASSURED"}
)

// The states in which the kernel counts a connection as active (clears
// IP_VS_CONN_F_INACTIVE): TCP's tcp_state_active_table, SCTP's
// ESTABLISHED; a UDP connection is never active.
const (
	tcpEstablished  State = 1
	tcpSynSent      State = 2
	tcpSynRecv      State = 3
	tcpSynAck       State = 10
	sctpEstablished State = 8
)

func stateNames(p Protocol, template bool) []string {
	switch {
	case template:
		return templateStates
	case p == ProtoTCP:
		return tcpStates
	case p == ProtoUDP:
		return udpStates
	case p == ProtoSCTP:
		return sctpStates
	}
	return nil
}

// Origin says where an entry came from; only /proc/net/ip_vs_conn_sync
// shows it.
type Origin uint8

const (
	OriginUnknown Origin = iota // read from /proc/net/ip_vs_conn
	OriginLocal                 // scheduled by this box
	OriginSync                  // created by a sync message
)

func (o Origin) String() string {
	switch o {
	case OriginLocal:
		return "LOCAL"
	case OriginSync:
		return "SYNC"
	}
	return "-"
}

// Conn is one entry of the kernel's connection table: a connection or a
// persistence template.
type Conn struct {
	Protocol Protocol
	// Client is the client's address and port; a template's port is 0
	// and its address the client's masked by the persistence netmask.
	Client netip.AddrPort
	// Virtual is the virtual address and port the client reached. A
	// firewall-mark template carries the mark here, in the address's
	// first four bytes (see FWMark), and port 0.
	Virtual netip.AddrPort
	Dest    netip.AddrPort // the real server
	State   State
	// Template marks a persistence template. The table does not say so;
	// an entry is one when its client port is 0 and its state is a
	// template's (NONE, ASSURED). IPVS's FTP helper makes TCP data
	// connections that look the same until their first packet (client
	// port not known yet, state NONE); lbd does not use that helper.
	Template bool
	Expires  time.Duration // left before the entry expires, in whole seconds
	Origin   Origin
	// PEName is the persistence engine (sip) of an entry that has
	// persistence-engine data; such entries are not sent.
	PEName string
}

// Family is 4 or 6: the address family of the client and virtual address.
func (c Conn) Family() int {
	if c.Client.Addr().Is4() {
		return 4
	}
	return 6
}

// FWMark returns the firewall mark of a firewall-mark service's template
// (protocol IP), which the kernel stores in place of the virtual address.
func (c Conn) FWMark() (uint32, bool) {
	if !c.Template || c.Protocol != ProtoIP {
		return 0, false
	}
	var b [4]byte
	if a := c.Virtual.Addr(); a.Is4() {
		b = a.As4()
	} else {
		s := a.As16()
		copy(b[:], s[:4])
	}
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// StateName names the state as the kernel does.
func (c Conn) StateName() string {
	names := stateNames(c.Protocol, c.Template)
	if int(c.State) < len(names) {
		return names[c.State]
	}
	return "ERR!"
}

// active reports whether the kernel counts c as an active connection.
func (c Conn) active() bool {
	switch {
	case c.Template:
		return false
	case c.Protocol == ProtoTCP:
		return c.State == tcpEstablished || c.State == tcpSynSent || c.State == tcpSynRecv || c.State == tcpSynAck
	case c.Protocol == ProtoSCTP:
		return c.State == sctpEstablished
	}
	return false
}

func (c Conn) String() string {
	kind := ""
	if c.Template {
		kind = " template"
	}
	return fmt.Sprintf("%s%s %s -> %s -> %s %s", c.Protocol, kind, c.Client, c.Virtual, c.Dest, c.StateName())
}
