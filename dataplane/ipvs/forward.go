package ipvs

import "github.com/lbdproject/lbd/lvs"

// packedForward is an lvs.Forward in 4 bytes, so that destState stays 56
// bytes (the cache holds 100,000 of them at scale): method, encapsulation
// and checksum mode in 2 bits each (each has 3 values), the GUE port in
// the high 16 bits.
type packedForward uint32

func pack(f lvs.Forward) packedForward {
	return packedForward(uint32(f.Method&3) | uint32(f.Tunnel&3)<<2 | uint32(f.Checksum&3)<<4 | uint32(f.Port)<<16)
}

func (p packedForward) unpack() lvs.Forward {
	return lvs.Forward{Method: lvs.Method(p & 3), Tunnel: lvs.Encap(p >> 2 & 3), Checksum: lvs.Checksum(p >> 4 & 3), Port: uint16(p >> 16)}
}
