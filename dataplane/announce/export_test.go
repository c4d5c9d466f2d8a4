package announce

import (
	"net"
	"net/netip"

	"github.com/mdlayher/ndp"
)

// NDPFrame lets the tests in package announce_test build and read NDP
// frames with the codec the announcer uses; the neighbour's kernel, which
// must accept what the announcer sends, checks it independently.
type NDPFrame struct {
	EthDst, EthSrc net.HardwareAddr
	Src, Dst       netip.Addr
	HopLimit       uint8
	Msg            ndp.Message
}

func MarshalNDP(f NDPFrame) ([]byte, error) {
	return (&ndpPacket{ethDst: f.EthDst, ethSrc: f.EthSrc, src: f.Src, dst: f.Dst, hopLimit: f.HopLimit, msg: f.Msg}).marshal()
}

func ParseNDP(b []byte) (NDPFrame, error) {
	p, err := parseNDP(b)
	if err != nil {
		return NDPFrame{}, err
	}
	return NDPFrame{EthDst: p.ethDst, EthSrc: p.ethSrc, Src: p.src, Dst: p.dst, HopLimit: p.hopLimit, Msg: p.msg}, nil
}
