package genl

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Options set up a Conn. The zero Options keep the kernel's defaults.
type Options struct {
	// CapAck asks the kernel to answer errors without a copy of the
	// request (NETLINK_CAP_ACK), best effort: the answers of a batch of
	// requests then take less of the receive buffer.
	CapAck bool
	// RecvBuf and SendBuf, when not 0, size the socket's buffers in bytes
	// (SO_RCVBUFFORCE or, without CAP_NET_ADMIN, SO_RCVBUF up to
	// net.core.rmem_max; likewise for sending), best effort.
	RecvBuf, SendBuf int
	// RecvTimeout, when not 0, bounds the wait of Recv, which then fails
	// with EAGAIN.
	RecvTimeout time.Duration
}

// recvBufLen is the size of Conn's buffer for one received datagram.
const recvBufLen = 64 << 10

// Conn is a generic netlink socket bound to a port id of its own, talking
// to the kernel. It is not safe for concurrent use.
type Conn struct {
	fd     int
	rbuf   []byte               // one received datagram
	kernel unix.SockaddrNetlink // where Send sends, reused
}

// Open opens a generic netlink socket.
func Open(o Options) (*Conn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_GENERIC)
	if err != nil {
		return nil, fmt.Errorf("opening a generic netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("binding a generic netlink socket: %w", err)
	}
	if o.CapAck {
		_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	}
	if o.RecvBuf > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, o.RecvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, o.RecvBuf)
	}
	if o.SendBuf > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, o.SendBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, o.SendBuf)
	}
	if o.RecvTimeout > 0 {
		tv := unix.NsecToTimeval(o.RecvTimeout.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("setting a generic netlink socket's receive timeout: %w", err)
		}
	}
	return &Conn{
		fd:     fd,
		rbuf:   make([]byte, recvBufLen),
		kernel: unix.SockaddrNetlink{Family: unix.AF_NETLINK},
	}, nil
}

// Close closes the socket.
func (c *Conn) Close() error { return unix.Close(c.fd) }

// Send hands the messages b (an Encoder's Encoded) to the kernel in one
// sendmsg. The kernel runs kernel-bound requests before it returns.
func (c *Conn) Send(b []byte) error {
	for {
		err := unix.Sendto(c.fd, b, 0, &c.kernel)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// Recv waits for one datagram of answers and returns it, for Messages. It
// is the Conn's buffer, valid until the next Recv. A datagram too short to
// hold a message is an error.
func (c *Conn) Recv() ([]byte, error) {
	for {
		n, _, err := unix.Recvfrom(c.fd, c.rbuf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n < NetlinkHeaderLen {
			return nil, fmt.Errorf("short netlink answer (%d bytes)", n)
		}
		return c.rbuf[:n], nil
	}
}

// resolveTimeout bounds ResolveFamily's wait for the controller's answer.
const resolveTimeout = 30 * time.Second

// ResolveFamily asks the generic netlink controller (GENL_ID_CTRL) for
// the id of the family called name ("IPVS", say), on a socket of its own.
// A family the kernel does not know (its module is not loaded) fails with
// ENOENT; a name of GENL_NAMSIZ (16) bytes or more, with EINVAL.
func ResolveFamily(name string) (uint16, error) {
	c, err := Open(Options{CapAck: true, RecvTimeout: resolveTimeout})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	id, err := c.resolveFamily(name)
	if err != nil {
		return 0, fmt.Errorf("looking up the %s generic netlink family: %w", name, err)
	}
	return id, nil
}

func (c *Conn) resolveFamily(name string) (uint16, error) {
	const seq = 1
	var e Encoder
	encodeGetFamily(&e, seq, name)
	if err := c.Send(e.Encoded()); err != nil {
		return 0, err
	}
	for {
		b, err := c.Recv()
		if err != nil {
			return 0, err
		}
		if id, done, err := familyAnswer(b, seq); done {
			return id, err
		}
	}
}
