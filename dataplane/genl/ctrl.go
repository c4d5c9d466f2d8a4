package genl

import "errors"

// The generic netlink controller, from include/uapi/linux/genetlink.h, as
// github.com/moby/ipvs v1.1.0 names it in constants_linux.go (Apache-2.0).
const (
	ctrlID             = 0x10 // GENL_ID_CTRL, the controller's family id
	ctrlCmdGetFamily   = 3    // CTRL_CMD_GETFAMILY
	ctrlAttrFamilyID   = 1    // CTRL_ATTR_FAMILY_ID, u16
	ctrlAttrFamilyName = 2    // CTRL_ATTR_FAMILY_NAME, NUL-terminated
	// ctrlVersion is the version lbd's requests to the controller have
	// always carried.
	ctrlVersion = 1

	nlmFRequest = 0x1 // NLM_F_REQUEST
	nlmFAck     = 0x4 // NLM_F_ACK
)

// encodeGetFamily encodes the controller request for the id of the family
// called name.
func encodeGetFamily(e *Encoder, seq uint32, name string) {
	start := e.Begin(ctrlID, nlmFRequest|nlmFAck, seq, ctrlCmdGetFamily, ctrlVersion)
	e.String(ctrlAttrFamilyName, name)
	e.End(start)
}

// familyAnswer looks for the controller's answer to request seq in the
// datagram b. done says whether it was there: then id is the family's id,
// or err why there is none.
func familyAnswer(b []byte, seq uint32) (id uint16, done bool, err error) {
	for m := range Messages(b) {
		if m.Seq != seq {
			continue
		}
		if m.Type == nlmsgError {
			if e := m.Errno(); e != 0 {
				return 0, true, e
			}
			return 0, true, errors.New("no answer")
		}
		if len(m.Payload) < HeaderLen {
			continue
		}
		for typ, v := range Attrs(m.Payload[HeaderLen:]) {
			if typ == ctrlAttrFamilyID && len(v) >= 2 {
				return native.Uint16(v), true, nil
			}
		}
		return 0, true, errors.New("no id in the answer")
	}
	return 0, false, nil
}
