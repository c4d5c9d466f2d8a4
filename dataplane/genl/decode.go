package genl

import (
	"iter"
	"syscall"
)

// Message is one netlink message of a received datagram.
type Message struct {
	Type  uint16 // a family id, or NLMSG_ERROR, NLMSG_DONE...
	Flags uint16
	Seq   uint32
	// Payload follows the netlink header: for a generic netlink message,
	// the generic netlink header (HeaderLen bytes) and the attributes; for
	// NLMSG_ERROR, the error code and the (perhaps capped) request.
	Payload []byte
}

// Errno is the error code of an NLMSG_ERROR message: 0 for an
// acknowledgement, EBADMSG when the message is too short to hold one.
func (m Message) Errno() syscall.Errno {
	if len(m.Payload) < 4 {
		return syscall.EBADMSG
	}
	return syscall.Errno(-int32(native.Uint32(m.Payload)))
}

// Messages iterates over the netlink messages of one datagram, b. It
// stops at the first message whose length does not fit in what is left.
// The messages' payloads are slices of b.
func Messages(b []byte) iter.Seq[Message] {
	return func(yield func(Message) bool) {
		for len(b) >= NetlinkHeaderLen {
			l := int(native.Uint32(b))
			if l < NetlinkHeaderLen || l > len(b) {
				return
			}
			m := Message{
				Type:    native.Uint16(b[4:]),
				Flags:   native.Uint16(b[6:]),
				Seq:     native.Uint32(b[8:]),
				Payload: b[NetlinkHeaderLen:l],
			}
			if !yield(m) {
				return
			}
			b = b[min(Align(l), len(b)):]
		}
	}
}

// Attrs iterates over the attributes in b (a generic netlink message's
// payload after its HeaderLen-byte header, or a nested attribute's value),
// yielding each one's type, without the NLA_F_NESTED and
// NLA_F_NET_BYTEORDER bits, and value. It stops at the first attribute
// whose length does not fit in what is left.
func Attrs(b []byte) iter.Seq2[uint16, []byte] {
	return func(yield func(uint16, []byte) bool) {
		for len(b) >= attrHeaderLen {
			l := int(native.Uint16(b))
			if l < attrHeaderLen || l > len(b) {
				return
			}
			if !yield(native.Uint16(b[2:])&^(nlaFNested|nlaFNetByteorder), b[attrHeaderLen:l]) {
				return
			}
			b = b[min(Align(l), len(b)):]
		}
	}
}
