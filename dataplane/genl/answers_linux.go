package genl

import "golang.org/x/sys/unix"

// ReadAck waits for the kernel's answer to request seq: nil for an
// acknowledgement, its errno for an error. Answers to other requests are
// skipped.
func (c *Conn) ReadAck(seq uint32) error {
	for {
		b, err := c.Recv()
		if err != nil {
			return err
		}
		for m := range Messages(b) {
			if m.Seq == seq && m.Type == unix.NLMSG_ERROR {
				if e := m.Errno(); e != 0 {
					return e
				}
				return nil
			}
		}
	}
}

// ReadDump reads the answers of dump request seq to their end, handing
// each message of family to each. A reply the kernel flagged as
// interrupted is read to its end and then answered ErrDumpInterrupted
// (see RetryDump); an error answer ends it with its errno.
func (c *Conn) ReadDump(seq uint32, family uint16, each func(Message) error) error {
	interrupted := false
	for {
		b, err := c.Recv()
		if err != nil {
			return err
		}
		for m := range Messages(b) {
			if m.Seq != seq {
				continue // a late answer to an earlier request
			}
			interrupted = interrupted || m.DumpInterrupted()
			switch m.Type {
			case unix.NLMSG_DONE:
				if interrupted {
					return ErrDumpInterrupted
				}
				return nil
			case unix.NLMSG_ERROR:
				return m.Errno()
			case family:
				if err := each(m); err != nil {
					return err
				}
			}
		}
	}
}
