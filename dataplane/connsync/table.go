package connsync

// The kernel's connection table as /proc/net/ip_vs_conn and
// /proc/net/ip_vs_conn_sync show it (net/netfilter/ipvs/ip_vs_conn.c,
// ip_vs_conn_seq_show and ip_vs_conn_sync_seq_show). One header line, then
// one line per entry, fields separated by spaces:
//
//	Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData
//	TCP C6120B0B 9C40 C6126401 0050 C6120301 0050 ESTABLISHED     899
//	TCP 2001:0002:0000:0001:0000:0000:0000:000b 9C40 2001:... 0050 2001:... 0050 ESTABLISHED     899
//
// An IPv4 address is eight hex digits (the address in network order read
// as one number), an IPv6 one the eight groups of %pI6; ports are four hex
// digits; State is the protocol's state name, or a template's (NONE,
// ASSURED); Expires is the seconds left. PEName and PEData follow only for
// an entry with persistence-engine data. ip_vs_conn_sync has Origin (LOCAL
// or SYNC) before Expires and no persistence-engine columns. The
// destination's family may differ from the client's (an IPv6 service with
// an IPv4 tunnel destination).
//
// The kernel fills each read of the file with at most a page of lines,
// and finds where the previous read ended by counting entries along its
// hash table from the start. The table is one for every network
// namespace, so an entry added or removed anywhere (a connection
// scheduled or expired, one a backup daemon received) while the file is
// read may make it skip or repeat entries: a repeated entry is sent twice,
// which the receiver takes as an update; a skipped one is not sent. And
// reading the file costs time quadratic in the number of entries (of all
// namespaces).

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// maxLine bounds a line: the longest the kernel writes is two IPv6
// addresses and a destination, then a persistence engine's name (16
// bytes) and data (255 bytes, shown as text).
const maxLine = 1024

// ParseError is a line of the table that Reader could not read.
type ParseError struct {
	Line int    // from 1, the header included
	Text string // the line
	Err  error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("IPVS connection table line %d %q: %v", e.Line, e.Text, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

// layout is which of the kernel's files (and versions) a header names.
type layout uint8

const (
	layoutUnknown layout = iota
	layoutConn           // ip_vs_conn: ... State Expires [PEName PEData]
	layoutPlain          // ip_vs_conn before persistence engines: ... State Expires
	layoutSync           // ip_vs_conn_sync: ... State Origin Expires
)

var headers = map[string]layout{
	"Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires PEName PEData": layoutConn,
	"Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires":               layoutPlain,
	"Pro FromIP FPrt ToIP TPrt DestIP DPrt State Origin Expires":        layoutSync,
}

// Reader reads the connection table line by line: memory stays bounded
// whatever the table's size.
type Reader struct {
	sc     *bufio.Scanner
	line   int
	layout layout
}

// NewReader reads the table from r, which starts with the header line.
func NewReader(r io.Reader) *Reader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxLine)
	return &Reader{sc: sc}
}

// Next returns the next entry, io.EOF after the last, or a *ParseError
// naming a line it could not read (the reader is then done).
func (r *Reader) Next() (Conn, error) {
	for r.sc.Scan() {
		r.line++
		text := r.sc.Text()
		if r.layout == layoutUnknown {
			l, ok := headers[strings.Join(strings.Fields(text), " ")]
			if !ok {
				return Conn{}, r.fail(r.line, text, errors.New("not the header of /proc/net/ip_vs_conn or ip_vs_conn_sync"))
			}
			r.layout = l
			continue
		}
		c, err := parseLine(strings.Fields(text), r.layout)
		if err != nil {
			return Conn{}, r.fail(r.line, text, err)
		}
		return c, nil
	}
	err := r.sc.Err()
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return Conn{}, r.fail(r.line+1, "", fmt.Errorf("a line longer than %d bytes", maxLine))
	case err != nil:
		return Conn{}, fmt.Errorf("reading the IPVS connection table after line %d: %w", r.line, err)
	case r.layout == layoutUnknown:
		return Conn{}, r.fail(1, "", errors.New("no header"))
	}
	return Conn{}, io.EOF
}

// fail ends the reader (later calls return io.EOF) with an error at line.
func (r *Reader) fail(line int, text string, err error) error {
	r.sc = bufio.NewScanner(strings.NewReader(""))
	r.layout = layoutPlain
	return &ParseError{Line: line, Text: text, Err: err}
}

// All iterates over the remaining entries; an error ends it.
func (r *Reader) All() iter.Seq2[Conn, error] {
	return func(yield func(Conn, error) bool) {
		for {
			c, err := r.Next()
			if err == io.EOF {
				return
			}
			if !yield(c, err) || err != nil {
				return
			}
		}
	}
}

// parseLine reads one entry's fields.
func parseLine(f []string, l layout) (Conn, error) {
	var c Conn
	switch {
	case l == layoutSync && len(f) == 10:
		switch f[8] {
		case "LOCAL":
			c.Origin = OriginLocal
		case "SYNC":
			c.Origin = OriginSync
		default:
			return Conn{}, fmt.Errorf("origin %q is neither LOCAL nor SYNC", f[8])
		}
		f = append(f[:8], f[9])
	case l == layoutConn && (len(f) == 10 || len(f) == 11):
		// The persistence engine's name, then its data as text
		// (which may be empty).
		c.PEName = f[9]
		f = f[:9]
	case l != layoutSync && len(f) == 9:
	default:
		return Conn{}, fmt.Errorf("%d fields", len(f))
	}
	var err error
	if c.Protocol, err = parseProtocol(f[0]); err != nil {
		return Conn{}, err
	}
	if c.Client, err = parseAddrPort(f[1], f[2], 0); err != nil {
		return Conn{}, fmt.Errorf("client: %w", err)
	}
	fam := c.Family()
	if c.Virtual, err = parseAddrPort(f[3], f[4], fam); err != nil {
		return Conn{}, fmt.Errorf("virtual: %w", err)
	}
	if c.Dest, err = parseAddrPort(f[5], f[6], 0); err != nil {
		return Conn{}, fmt.Errorf("destination: %w", err)
	}
	if err := c.parseState(f[7]); err != nil {
		return Conn{}, err
	}
	exp, err := strconv.ParseUint(f[8], 10, 32)
	if err != nil {
		return Conn{}, fmt.Errorf("expires %q is not a count of seconds", f[8])
	}
	c.Expires = time.Duration(exp) * time.Second
	return c, nil
}

// parseState reads the state name, deciding whether c is a template.
func (c *Conn) parseState(name string) error {
	c.Template = c.Client.Port() == 0 && indexOf(templateStates, name) >= 0
	if c.Protocol == ProtoIP && !c.Template {
		return fmt.Errorf("protocol IP with client port %d and state %q: only a firewall-mark template has protocol IP", c.Client.Port(), name)
	}
	names := stateNames(c.Protocol, c.Template)
	if names == nil {
		c.State = StateUnknown // a protocol whose states lbd does not know
		return nil
	}
	i := indexOf(names, name)
	if i < 0 {
		return fmt.Errorf("%q is not a state of a %s %s", name, c.Protocol, map[bool]string{true: "template", false: "connection"}[c.Template])
	}
	c.State = State(i)
	return nil
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// parseProtocol reads ip_vs_proto_name's names: TCP, UDP, SCTP, IP, ICMP,
// ICMPv6 and IP_<number> for the others.
func parseProtocol(s string) (Protocol, error) {
	switch s {
	case "IP":
		return ProtoIP, nil
	case "TCP":
		return ProtoTCP, nil
	case "UDP":
		return ProtoUDP, nil
	case "SCTP":
		return ProtoSCTP, nil
	case "ICMP":
		return 1, nil
	case "ICMPv6":
		return 58, nil
	}
	if n, ok := strings.CutPrefix(s, "IP_"); ok {
		if v, err := strconv.ParseUint(n, 10, 8); err == nil && strconv.FormatUint(v, 10) == n {
			return Protocol(v), nil
		}
	}
	return 0, fmt.Errorf("unknown protocol %q", s)
}

// parseAddrPort reads an address as the kernel prints it and a port of
// four hex digits. family, when not 0, is the family the address must be.
func parseAddrPort(addr, port string, family int) (netip.AddrPort, error) {
	a, err := parseAddr(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if family == 4 && !a.Is4() || family == 6 && a.Is4() {
		return netip.AddrPort{}, fmt.Errorf("address %s is not of the client's family (IPv%d)", addr, family)
	}
	if len(port) != 4 {
		return netip.AddrPort{}, fmt.Errorf("port %q is not four hex digits", port)
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q is not four hex digits", port)
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// parseAddr reads an IPv4 address as eight hex digits or an IPv6 one as
// %pI6 writes it (eight groups of four hex digits).
func parseAddr(s string) (netip.Addr, error) {
	switch len(s) {
	case 8:
		v, err := strconv.ParseUint(s, 16, 32)
		if err == nil {
			return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), nil
		}
	case 39:
		var b [16]byte
		for i := range 8 {
			g := s[i*5 : i*5+4]
			v, err := strconv.ParseUint(g, 16, 16)
			if err != nil || i < 7 && s[i*5+4] != ':' {
				return netip.Addr{}, fmt.Errorf("address %q is not eight groups of four hex digits", s)
			}
			b[2*i], b[2*i+1] = byte(v>>8), byte(v)
		}
		return netip.AddrFrom16(b), nil
	}
	return netip.Addr{}, fmt.Errorf("address %q is neither eight hex digits (IPv4) nor eight groups of four (IPv6)", s)
}
