package connsync

import (
	"context"
	"fmt"
	"io"
	"iter"
	"math"
	"time"

	"golang.org/x/time/rate"

	"github.com/lbdproject/lbd/lvs"
)

// Service is what a sync message needs of a connection's virtual service
// and the connection table does not show.
type Service struct {
	// Forward is how the service's real servers are reached. The
	// receiver uses it only for a connection whose destination it
	// lacks; one it has brings its own.
	Forward lvs.Method
	// FWMark is the service's firewall mark, 0 for an address service:
	// the receiver looks a marked connection's service up by it.
	FWMark uint32
	// Persistence is the service's persistence timeout, which its
	// templates take on the receiver (0: a template keeps what it has
	// left here, at least a second).
	Persistence time.Duration
}

// Services tells the sender the virtual service of an entry, or false to
// leave the entry out (not lbd's, or not to be sent).
type Services func(Conn) (Service, bool)

// ByVirtual resolves entries by their virtual server: address services
// by virtual address, port and protocol (their templates too, when the
// template has the service's port: a persistent service on port 0 or 21
// makes templates of port 0, found under the key of port 0), and
// firewall-mark templates by mark. A connection of a firewall-mark
// service cannot be told from the table (it shows the packet's address)
// and is left out; such services need a Services of their own.
func ByVirtual(services map[lvs.Key]Service) Services {
	m := make(map[lvs.Key]Service, len(services))
	for k, s := range services {
		k.Addr = k.Addr.Unmap()
		if k.IsFWMark() {
			s.FWMark = k.FWMark
		}
		m[k] = s
	}
	return func(c Conn) (Service, bool) {
		if mark, ok := c.FWMark(); ok {
			fam := lvs.IPv4
			if c.Family() == 6 {
				fam = lvs.IPv6
			}
			s, ok := m[lvs.FWMarkKey(mark, fam)]
			return s, ok
		}
		p, ok := lvs.ProtocolOf(uint8(c.Protocol))
		if !ok {
			return Service{}, false
		}
		s, ok := m[lvs.Key{Addr: c.Virtual.Addr(), Port: c.Virtual.Port(), Protocol: p}]
		return s, ok
	}
}

// DefaultRate is the messages a second Send sends unless told otherwise:
// with IPv4 entries of 36 bytes, 40 to a message of 1472, about 80,000
// connections a second.
const DefaultRate = 2000

// Options bound what a Sender sends.
type Options struct {
	// Rate is the most messages a second, so that the peer's backup
	// daemon (one kernel thread, its socket buffer net.core.rmem_default
	// unless net.ipv4.vs.sync_sock_size says otherwise) keeps up: what
	// overflows its buffer is lost. 0 is DefaultRate; negative sends as
	// fast as the local socket takes them.
	Rate int
	// Limit is the most entries one Send sends; it stops reading there.
	// 0 is no limit.
	Limit int
}

// Stats says what one Send read and sent.
type Stats struct {
	Read      int // entries read
	Sent      int // entries sent
	Templates int // of Sent, persistence templates
	// NoService entries were left out because Services named no
	// service for them.
	NoService int
	// Unsupported entries were left out because the protocol cannot
	// carry them as the table shows them: persistence-engine data, a
	// protocol whose states lbd does not know, addresses of two
	// families, a forwarding method lbd does not know.
	Unsupported int
	Truncated   bool // stopped at Options.Limit
	Messages    int  // UDP datagrams sent
	Bytes       int  // their payload
}

// Sender sends connection entries to the backup sync daemons listening
// on one multicast group. It is not safe for concurrent use.
type Sender struct {
	out     io.WriteCloser
	syncID  uint8
	maxLen  int
	opts    Options
	limiter *rate.Limiter // nil: no bound
	nsPath  string        // where OpenTable reads for SendTable
	to      string        // the destination, for errors
}

// newSender wraps out, which takes one message per Write.
func newSender(out io.WriteCloser, syncID uint8, maxLen int, o Options, to string) *Sender {
	s := &Sender{out: out, syncID: syncID, maxLen: maxLen, opts: o, to: to}
	r := o.Rate
	if r == 0 {
		r = DefaultRate
	}
	if r > 0 {
		s.limiter = rate.NewLimiter(rate.Limit(r), max(1, min(r/100, 32)))
	}
	return s
}

// MaxLen is the most bytes a message takes.
func (s *Sender) MaxLen() int { return s.maxLen }

// Close closes the socket.
func (s *Sender) Close() error { return s.out.Close() }

// SendTable reads the connection table of the Sender's network namespace
// and sends what services names. The table is read as it is sent, never
// held whole.
func (s *Sender) SendTable(ctx context.Context, services Services) (Stats, error) {
	f, err := OpenTable(s.nsPath)
	if err != nil {
		return Stats{}, err
	}
	defer f.Close()
	return s.Send(ctx, NewReader(f).All(), services)
}

// Send sends the entries of conns that services names, in messages of at
// most MaxLen bytes. An error from conns ends it once the entries before
// it are sent; what was sent stays sent.
func (s *Sender) Send(ctx context.Context, conns iter.Seq2[Conn, error], services Services) (Stats, error) {
	var st Stats
	m := newMessage(s.syncID, s.maxLen)
	for c, err := range conns {
		if err != nil {
			if ferr := s.flush(ctx, m, &st); ferr != nil {
				return st, ferr
			}
			return st, err
		}
		st.Read++
		e, ok := s.entry(c, services, &st)
		if !ok {
			continue
		}
		if s.opts.Limit > 0 && st.Sent == s.opts.Limit {
			st.Truncated = true
			break
		}
		if !m.add(e) {
			if err := s.flush(ctx, m, &st); err != nil {
				return st, err
			}
			if !m.add(e) {
				return st, fmt.Errorf("%s does not fit in a message of %d bytes", c, s.maxLen)
			}
		}
		st.Sent++
		if c.Template {
			st.Templates++
		}
	}
	return st, s.flush(ctx, m, &st)
}

// entry decides whether c is sent and makes its message entry.
func (s *Sender) entry(c Conn, services Services, st *Stats) (entry, bool) {
	if c.PEName != "" || c.State == StateUnknown || !oneFamily(c) {
		st.Unsupported++
		return entry{}, false
	}
	svc, ok := services(c)
	if !ok {
		st.NoService++
		return entry{}, false
	}
	flags, ok := methodFlags(svc.Forward)
	if !ok {
		st.Unsupported++
		return entry{}, false
	}
	if !c.active() {
		flags |= flagInactive
	}
	e := entry{conn: c, flags: flags, fwmark: svc.FWMark}
	if c.Template {
		e.flags |= flagTemplate
		d := svc.Persistence
		if d <= 0 {
			d = max(c.Expires, time.Second)
		}
		e.timeout = uint32(min((d+time.Second-1)/time.Second, math.MaxUint32))
	}
	// A connection's timeout stays 0: the receiver takes its own for
	// the state, as the sending kernel's would be (cp->timeout is the
	// state's timeout, not what is left of it).
	return e, true
}

// methodFlags is the kernel's forwarding method flags for m: NOOUTPUT
// with every method but NAT, as __ip_vs_update_dest sets them.
func methodFlags(m lvs.Method) (uint32, bool) {
	switch m {
	case lvs.NAT:
		return flagMasq, true
	case lvs.DR:
		return flagDRoute | flagNoOutput, true
	case lvs.Tunnel:
		return flagTunnel | flagNoOutput, true
	}
	return 0, false
}

// flush sends m if it holds entries, within the rate, and empties it.
func (s *Sender) flush(ctx context.Context, m *message, st *Stats) error {
	b := m.bytes()
	if b == nil {
		return nil
	}
	var err error
	if s.limiter != nil {
		err = s.limiter.Wait(ctx)
	} else {
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("sending connections to %s: %w", s.to, err)
	}
	if _, err := s.out.Write(b); err != nil {
		return fmt.Errorf("sending a sync message of %d bytes to %s: %w", len(b), s.to, err)
	}
	st.Messages++
	st.Bytes += len(b)
	m.reset()
	return nil
}
