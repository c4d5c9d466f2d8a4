package connsync

// Sync messages, protocol version 1 (net/netfilter/ipvs/ip_vs_sync.c).
// Every field is in network byte order.
//
//	header, 8 bytes (struct ip_vs_sync_mesg):
//	  reserved u8 = 0 | syncid u8 | size be16 (the whole message)
//	  nr_conns u8     | version u8 = 1 | spare be16 = 0
//	entries, each padded to 4 bytes (struct ip_vs_sync_v4, 36 bytes;
//	struct ip_vs_sync_v6, 72 bytes; no options follow here):
//	  type u8 (bit 0: IPv6) | protocol u8 | ver_size be16 (version 0 in
//	  the top 4 bits, the entry's length in the low 12)
//	  flags be32 | state be16 | cport be16 | vport be16 | dport be16
//	  fwmark be32 | timeout be32 (seconds) | caddr | vaddr | daddr
//
// What the backup's kernel checks (ip_vs_process_message): the datagram
// is at least 4 bytes and exactly `size` long (it reads at most its
// daemon's sync_maxlen: a longer datagram is cut and dropped); syncid is
// its own unless its own is 0; version 1 needs reserved and spare 0 (else
// the message is read as version 0). Per entry: at least 36 bytes left,
// the entry within the message, version 0 in ver_size; an entry whose
// type has bits other than IPv6's, or that is shorter than its struct, or
// whose options are malformed, drops the rest of the message. Then
// (ip_vs_proc_sync_conn) it keeps only the flags of
// IP_VS_CONN_F_BACKUP_MASK (forwarding method, NOOUTPUT, INACTIVE, the
// sequence flags, NO_CPORT, TEMPLATE) and adds SYNC; it skips one entry
// (and goes on) whose protocol IPVS does not handle, or whose state is
// past its protocol's last, or an IPv6 one on a kernel without IPVS IPv6;
// a template's state is not checked.
//
// ip_vs_proc_conn then finds the entry by client, virtual address, port
// and protocol (a template also by TEMPLATE). A connection found with
// another destination is expired and made again, unless the message has
// INACTIVE (then it is taken as the stale news of a replaced connection
// and ignored); one found is updated (INACTIVE and the sequence flags
// only), bound to its destination if it had none, and its timer started
// again. A new one looks for its destination (ip_vs_find_dest: the
// service by firewall mark if fwmark is not 0, else by protocol, virtual
// address and port; then the real server by address and port, port 0 for
// a non-NAT firewall-mark service): found, the connection takes the
// destination's forwarding method and counts in its active or inactive
// connections; not found, it is made all the same, unbound, and forwards
// by the method its own flags say (it binds when a later message finds
// the destination). The timeout is the message's when not 0, else, for a
// connection, the receiver's own timeout for the state, for a template 3
// minutes.

import (
	"encoding/binary"
	"net/netip"
)

const (
	headerLen      = 8
	entryLen4      = 36
	entryLen6      = 72
	maxEntries     = 255 // nr_conns is one byte
	protoVersion   = 1
	typeInet6      = 1      // STYPE_F_INET6
	maxMessageSize = 0xffff // size is 16 bits
)

// Connection flags (include/uapi/linux/ip_vs.h).
const (
	flagMasq     uint32 = 0x0000
	flagTunnel   uint32 = 0x0002
	flagDRoute   uint32 = 0x0003
	flagNoOutput uint32 = 0x0080
	flagInactive uint32 = 0x0100
	flagTemplate uint32 = 0x1000
)

// entry is one connection as a message carries it: the table's entry
// and what the caller knows of its service.
type entry struct {
	conn    Conn
	flags   uint32
	fwmark  uint32
	timeout uint32 // seconds; 0 lets the receiver choose
}

func (e entry) len() int {
	if e.conn.Family() == 6 {
		return entryLen6
	}
	return entryLen4
}

// message builds one sync message of at most max bytes.
type message struct {
	buf []byte
	max int
	n   int // entries
}

func newMessage(syncID uint8, maxLen int) *message {
	m := &message{buf: make([]byte, 0, maxLen), max: min(maxLen, maxMessageSize)}
	m.buf = append(m.buf, 0, syncID, 0, 0, 0, protoVersion, 0, 0)
	return m
}

// add appends e if it fits; false if the message is full.
func (m *message) add(e entry) bool {
	if m.n == maxEntries || len(m.buf)+e.len() > m.max {
		return false
	}
	m.buf = appendEntry(m.buf, e)
	m.n++
	return true
}

// bytes returns the message with its size and count written; nil when it
// holds no entry.
func (m *message) bytes() []byte {
	if m.n == 0 {
		return nil
	}
	binary.BigEndian.PutUint16(m.buf[2:], uint16(len(m.buf)))
	m.buf[4] = byte(m.n)
	return m.buf
}

// reset empties the message for the next entries.
func (m *message) reset() {
	m.buf = m.buf[:headerLen]
	m.n = 0
}

// appendEntry writes e as struct ip_vs_sync_v4 or ip_vs_sync_v6. Both
// lengths are multiples of 4, so no padding follows.
func appendEntry(b []byte, e entry) []byte {
	c := e.conn
	typ := byte(0)
	if c.Family() == 6 {
		typ = typeInet6
	}
	be := binary.BigEndian
	b = append(b, typ, byte(c.Protocol))
	b = be.AppendUint16(b, uint16(e.len())) // version 0 in the top bits
	b = be.AppendUint32(b, e.flags)
	b = be.AppendUint16(b, uint16(c.State))
	b = be.AppendUint16(b, c.Client.Port())
	b = be.AppendUint16(b, c.Virtual.Port())
	b = be.AppendUint16(b, c.Dest.Port())
	b = be.AppendUint32(b, e.fwmark)
	b = be.AppendUint32(b, e.timeout)
	for _, a := range [3]netip.Addr{c.Client.Addr(), c.Virtual.Addr(), c.Dest.Addr()} {
		s := a.As16() // an IPv4 address in the last four bytes
		if typ == typeInet6 {
			b = append(b, s[:]...)
		} else {
			b = append(b, s[12:]...)
		}
	}
	return b
}

// oneFamily reports whether the protocol can carry c: an entry has one
// family for its three addresses (the receiver takes the destination's
// family from the entry's type).
func oneFamily(c Conn) bool {
	v4 := c.Client.Addr().Is4()
	return c.Virtual.Addr().Is4() == v4 && c.Dest.Addr().Is4() == v4
}
