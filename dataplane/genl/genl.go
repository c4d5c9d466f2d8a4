// Package genl encodes and decodes generic netlink messages, and talks to
// the kernel over a generic netlink socket: enough for lbd's own IPVS
// writers (dataplane/ipvs) and for any other family lbd may speak.
//
// Encoding appends to one reusable buffer (Encoder): a writer can encode
// tens of thousands of requests into it, send them, Reset it and go on
// without allocating. Decoding iterates over a received datagram
// (Messages, Attrs) without copying it. Conn, the socket, and
// ResolveFamily, which asks the generic netlink controller for a family's
// id, are Linux-only.
//
// The layouts are those of include/uapi/linux/netlink.h and genetlink.h:
//
//	message:   struct nlmsghdr (16 bytes) | struct genlmsghdr (4 bytes) | attributes
//	attribute: struct nlattr {len, type u16} (4 bytes) | value | padding to 4 bytes
//
// Integers are in the host's byte order unless an appender says otherwise
// (BE16).
package genl

import "encoding/binary"

const (
	// NetlinkHeaderLen is the length of a netlink message header (struct
	// nlmsghdr: length, type, flags, sequence number, port id).
	NetlinkHeaderLen = 16
	// HeaderLen is the length of the generic netlink header that follows
	// it (struct genlmsghdr: command, version, reserved).
	HeaderLen = 4
	// attrHeaderLen is the length of an attribute's header (struct nlattr).
	attrHeaderLen = 4

	// Message type and attribute type flags, from netlink.h.
	nlmsgError       = 0x2    // NLMSG_ERROR
	nlaFNested       = 0x8000 // NLA_F_NESTED
	nlaFNetByteorder = 0x4000 // NLA_F_NET_BYTEORDER
)

var native = binary.NativeEndian

// Align rounds n up to the 4-byte alignment of netlink messages and
// attributes (NLMSG_ALIGN, NLA_ALIGN).
func Align(n int) int { return (n + 3) &^ 3 }
