package genl

import "encoding/binary"

// Encoder appends generic netlink messages to a buffer. Begin starts a
// message and End fills in its length; in between the attribute appenders
// add attributes, and BeginNested/EndNested wrap some of them in a nested
// attribute. Every attribute is padded to 4 bytes, so every message stays
// aligned. The zero Encoder is empty and ready; its buffer is kept across
// Reset, so encoding allocates only while the buffer grows.
type Encoder struct {
	buf []byte
	// last is the offset of the last message begun.
	last int
}

// Begin starts a message of the given netlink type (a generic netlink
// family id), flags (NLM_F_*), sequence number, generic netlink command
// and family version, and returns its offset for End.
func (e *Encoder) Begin(family, flags uint16, seq uint32, cmd, version uint8) int {
	start := len(e.buf)
	e.last = start
	var h [NetlinkHeaderLen + HeaderLen]byte
	native.PutUint16(h[4:], family)
	native.PutUint16(h[6:], flags)
	native.PutUint32(h[8:], seq)
	// h[12:16], the port id, is 0: the kernel's.
	h[16] = cmd
	h[17] = version
	e.buf = append(e.buf, h[:]...)
	return start
}

// End sets the length of the message that Begin returned start for.
func (e *Encoder) End(start int) {
	native.PutUint32(e.buf[start:], uint32(len(e.buf)-start))
}

// AddLastFlags sets flags (NLM_F_*) in the header of the last message
// begun since the last Reset (there must be one), such as NLM_F_ACK on the
// last request of a send.
func (e *Encoder) AddLastFlags(flags uint16) {
	h := e.buf[e.last+6:]
	native.PutUint16(h, native.Uint16(h)|flags)
}

// BeginNested starts a nested attribute of type typ (as given: a family
// that wants NLA_F_NESTED has it or-ed in) and returns its offset for
// EndNested. The attributes appended until then are its value.
func (e *Encoder) BeginNested(typ uint16) int {
	start := len(e.buf)
	e.attrHeader(typ, 0)
	return start
}

// EndNested sets the length of the nested attribute that BeginNested
// returned start for.
func (e *Encoder) EndNested(start int) {
	native.PutUint16(e.buf[start:], uint16(len(e.buf)-start))
}

// Bytes appends an attribute whose value is v.
func (e *Encoder) Bytes(typ uint16, v []byte) {
	e.attrHeader(typ, len(v))
	e.buf = append(e.buf, v...)
	e.pad()
}

// String appends an attribute whose value is s and a terminating NUL
// (NLA_NUL_STRING, NLA_STRING).
func (e *Encoder) String(typ uint16, s string) {
	e.attrHeader(typ, len(s)+1)
	e.buf = append(e.buf, s...)
	e.buf = append(e.buf, 0)
	e.pad()
}

// U8 appends an 8-bit attribute.
func (e *Encoder) U8(typ uint16, v uint8) {
	e.attrHeader(typ, 1)
	e.buf = append(e.buf, v)
	e.pad()
}

// U16 appends a 16-bit attribute in host byte order.
func (e *Encoder) U16(typ, v uint16) {
	e.attrHeader(typ, 2)
	e.buf = native.AppendUint16(e.buf, v)
	e.pad()
}

// BE16 appends a 16-bit attribute in network byte order (big-endian), as
// ports are.
func (e *Encoder) BE16(typ, v uint16) {
	e.attrHeader(typ, 2)
	e.buf = binary.BigEndian.AppendUint16(e.buf, v)
	e.pad()
}

// U32 appends a 32-bit attribute in host byte order.
func (e *Encoder) U32(typ uint16, v uint32) {
	e.attrHeader(typ, 4)
	e.buf = native.AppendUint32(e.buf, v)
	e.pad()
}

// Encoded returns the messages encoded since the last Reset. It is the
// Encoder's buffer, valid until the next change.
func (e *Encoder) Encoded() []byte { return e.buf }

// Reset empties the Encoder, keeping its buffer.
func (e *Encoder) Reset() { e.buf, e.last = e.buf[:0], 0 }

// attrHeader appends the header of an attribute of n bytes.
func (e *Encoder) attrHeader(typ uint16, n int) {
	e.buf = native.AppendUint16(e.buf, uint16(attrHeaderLen+n))
	e.buf = native.AppendUint16(e.buf, typ)
}

// pad appends zeros up to the next 4-byte boundary.
func (e *Encoder) pad() {
	for len(e.buf)%4 != 0 {
		e.buf = append(e.buf, 0)
	}
}
