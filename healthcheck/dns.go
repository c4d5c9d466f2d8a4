package healthcheck

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/lbdproject/lbd/config"
)

// dnsChecker sends one query over UDP, and again over TCP when the UDP
// reply is truncated, and judges the reply's rcode and answers.
//
// The query carries no EDNS0 record, so that servers that mishandle EDNS
// still answer; a large answer comes back truncated and is fetched over
// TCP, which also checks that the server answers over TCP.
type dnsChecker struct {
	dialer  *net.Dialer
	local   netip.AddrPort
	timeout time.Duration

	// query is the packed query with ID 0; each check copies it and sets
	// a random ID.
	query  []byte
	name   dnsmessage.Name
	qtype  dnsmessage.Type
	rcode  dnsmessage.RCode
	answer string // expect_answer; empty: any answers, or none, will do

	buffers sync.Pool // *[]byte of udpMaxReply for UDP replies
}

// dnsMaxSeen is how many answers a failed expect_answer quotes.
const dnsMaxSeen = 3

func newDNSChecker(hc config.HealthCheck) (*dnsChecker, error) {
	qname := hc.QueryName
	if qname == "" {
		return nil, errors.New("query_name is empty")
	}
	if !strings.HasSuffix(qname, ".") {
		qname += "." // the wire format has only fully qualified names
	}
	name, err := dnsmessage.NewName(qname)
	if err != nil {
		return nil, fmt.Errorf("query_name %s: %w", checkerQuote(hc.QueryName), err)
	}
	qtype, ok := dnsType(hc.QueryType)
	if !ok {
		return nil, fmt.Errorf("query_type %s is not supported", checkerQuote(hc.QueryType))
	}
	rcode, ok := dnsRcode(hc.ExpectRcode)
	if !ok {
		return nil, fmt.Errorf("expect_rcode %s is not supported", checkerQuote(hc.ExpectRcode))
	}
	// Recursion desired: the real servers may be resolvers, which would
	// otherwise answer only from their cache; authoritative servers
	// ignore the flag.
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: name, Type: qtype, Class: dnsmessage.ClassINET}); err != nil {
		return nil, fmt.Errorf("query_name %s: %w", checkerQuote(hc.QueryName), err)
	}
	query, err := b.Finish()
	if err != nil {
		return nil, fmt.Errorf("query_name %s: %w", checkerQuote(hc.QueryName), err)
	}
	c := &dnsChecker{
		dialer:  checkerDialer(),
		local:   checkerLocal(hc),
		timeout: checkerTimeout(hc),
		query:   query,
		name:    name,
		qtype:   qtype,
		rcode:   rcode,
		answer:  hc.ExpectAnswer,
	}
	c.buffers.New = func() any { b := make([]byte, udpMaxReply); return &b }
	return c, nil
}

// dnsType maps the configuration's query_type to the wire's value.
func dnsType(name string) (dnsmessage.Type, bool) {
	switch name {
	case "A", "":
		return dnsmessage.TypeA, true
	case "AAAA":
		return dnsmessage.TypeAAAA, true
	case "CNAME":
		return dnsmessage.TypeCNAME, true
	case "MX":
		return dnsmessage.TypeMX, true
	case "NS":
		return dnsmessage.TypeNS, true
	case "PTR":
		return dnsmessage.TypePTR, true
	case "SOA":
		return dnsmessage.TypeSOA, true
	case "SRV":
		return dnsmessage.TypeSRV, true
	case "TXT":
		return dnsmessage.TypeTXT, true
	}
	return 0, false
}

// dnsRcodeNames are the configuration's names of rcodes (expect_rcode),
// indexed by value.
func dnsRcodeNames() [6]string {
	return [6]string{
		dnsmessage.RCodeSuccess:        "NOERROR",
		dnsmessage.RCodeFormatError:    "FORMERR",
		dnsmessage.RCodeServerFailure:  "SERVFAIL",
		dnsmessage.RCodeNameError:      "NXDOMAIN",
		dnsmessage.RCodeNotImplemented: "NOTIMP",
		dnsmessage.RCodeRefused:        "REFUSED",
	}
}

// dnsRcode maps the configuration's expect_rcode to the wire's value.
func dnsRcode(name string) (dnsmessage.RCode, bool) {
	if name == "" {
		return dnsmessage.RCodeSuccess, true
	}
	for code, n := range dnsRcodeNames() {
		if n == name {
			return dnsmessage.RCode(code), true
		}
	}
	return 0, false
}

// dnsRcodeName names r as the configuration does.
func dnsRcodeName(r dnsmessage.RCode) string {
	if names := dnsRcodeNames(); int(r) < len(names) {
		return names[r]
	}
	return "RCODE" + strconv.Itoa(int(r))
}

func (c *dnsChecker) Check(ctx context.Context, t Target) error {
	ctx, cancel, start, deadline := checkerStart(ctx, c.timeout)
	defer cancel()
	raddr, err := checkerRemote(t)
	if err != nil {
		return err
	}
	// The query with TCP's two-byte length in front; UDP sends msg[2:].
	// A random ID, so that a stray or forged reply is not taken for ours.
	msg := make([]byte, 2+len(c.query))
	binary.BigEndian.PutUint16(msg, uint16(len(c.query)))
	copy(msg[2:], c.query)
	id := uint16(rand.Uint32())
	binary.BigEndian.PutUint16(msg[2:], id)

	bp := c.buffers.Get().(*[]byte)
	defer c.buffers.Put(bp)
	reply, err := udpExchange(ctx, start, deadline, c.dialer, c.local, raddr, msg[2:], *bp)
	if err != nil {
		return err
	}
	truncated, err := c.judge(reply, id, false)
	if !truncated {
		return err
	}
	// The UDP reply is done with: its buffer, as large as a TCP reply can
	// be, takes the TCP one.
	reply, err = c.exchangeTCP(ctx, start, deadline, raddr, msg, *bp)
	if err != nil {
		return err
	}
	_, err = c.judge(reply, id, true)
	return err
}

// exchangeTCP sends msg, length first, over a new TCP connection and
// returns the reply without its length, read into buf (udpMaxReply bytes:
// as long as a length can say).
func (c *dnsChecker) exchangeTCP(ctx context.Context, start, deadline time.Time, raddr netip.AddrPort, msg, buf []byte) ([]byte, error) {
	conn, err := tcpDial(ctx, c.dialer, c.local, raddr)
	if err != nil {
		return nil, checkerErr(ctx, start, "TCP connect", err)
	}
	defer tcpClose(conn)
	stop, err := checkerWatch(ctx, conn, deadline)
	if err != nil {
		return nil, checkerErr(ctx, start, "TCP connect", err)
	}
	defer stop()
	if _, err := conn.Write(msg); err != nil {
		return nil, checkerErr(ctx, start, "TCP send", err)
	}
	var n [2]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return nil, checkerErr(ctx, start, "TCP wait for reply", err)
	}
	reply := buf[:binary.BigEndian.Uint16(n[:])]
	if _, err := io.ReadFull(conn, reply); err != nil {
		return nil, checkerErr(ctx, start, "TCP read reply", err)
	}
	return reply, nil
}

// judge checks a reply to query id. It reports a truncated UDP reply
// without judging it further, for the caller to retry over TCP; a TCP
// reply is judged whatever its TC flag says, there being nothing larger
// to retry with.
func (c *dnsChecker) judge(reply []byte, id uint16, overTCP bool) (truncated bool, err error) {
	var p dnsmessage.Parser
	h, err := p.Start(reply)
	if err != nil {
		return false, fmt.Errorf("malformed reply: %w", err)
	}
	if h.ID != id {
		return false, fmt.Errorf("reply ID %d does not match query ID %d", h.ID, id)
	}
	if !h.Response {
		return false, errors.New("reply is not a response")
	}
	if h.Truncated && !overTCP {
		return true, nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return false, fmt.Errorf("malformed reply: %w", err)
	}
	// Some servers leave the question out of an error reply; a question
	// that is there must be ours.
	if len(qs) > 1 || (len(qs) == 1 && (qs[0].Type != c.qtype || qs[0].Class != dnsmessage.ClassINET ||
		!bytes.EqualFold(qs[0].Name.Data[:qs[0].Name.Length], c.name.Data[:c.name.Length]))) {
		return false, errors.New("reply is for another question")
	}
	if h.RCode != c.rcode {
		return false, fmt.Errorf("rcode %s, expected %s", dnsRcodeName(h.RCode), dnsRcodeName(c.rcode))
	}
	if c.answer == "" {
		return false, nil
	}
	// The first dnsMaxSeen answers are quoted in the result, and the rest
	// counted: compressed names make a reply's text many times its size.
	var (
		seen   []string
		unseen int
	)
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("malformed reply: %w", err)
		}
		text, known, err := dnsAnswerText(&p, rh)
		if err != nil {
			return false, fmt.Errorf("malformed reply: %w", err)
		}
		if !known {
			continue
		}
		if dnsContains(rh.Type, text, c.answer) {
			return false, nil
		}
		if len(seen) == dnsMaxSeen {
			unseen++
			continue
		}
		seen = append(seen, outsideText(text))
	}
	if len(seen) == 0 {
		return false, fmt.Errorf("no answer contains %s: no answers", checkerQuote(c.answer))
	}
	if unseen > 0 {
		seen = append(seen, fmt.Sprintf("… (%d more)", unseen))
	}
	return false, fmt.Errorf("no answer contains %s: answers are %s", checkerQuote(c.answer), strings.Join(seen, ", "))
}

// dnsContains reports whether an answer's text contains want. Names and
// addresses compare without regard to case, as DNS does; TXT strings are
// data and compare exactly.
func dnsContains(t dnsmessage.Type, text, want string) bool {
	if t == dnsmessage.TypeTXT {
		return strings.Contains(text, want)
	}
	return strings.Contains(strings.ToLower(text), strings.ToLower(want))
}

// dnsAnswerText renders the answer whose header was just read the way a
// zone file would, without owner, TTL, class and type: "192.0.2.1",
// "target.example.", "10 mail.example.". known is false for types the
// checker does not render, which are skipped.
func dnsAnswerText(p *dnsmessage.Parser, h dnsmessage.ResourceHeader) (text string, known bool, err error) {
	switch h.Type {
	case dnsmessage.TypeA:
		r, err := p.AResource()
		return netip.AddrFrom4(r.A).String(), true, err
	case dnsmessage.TypeAAAA:
		r, err := p.AAAAResource()
		return netip.AddrFrom16(r.AAAA).String(), true, err
	case dnsmessage.TypeCNAME:
		r, err := p.CNAMEResource()
		return r.CNAME.String(), true, err
	case dnsmessage.TypeNS:
		r, err := p.NSResource()
		return r.NS.String(), true, err
	case dnsmessage.TypePTR:
		r, err := p.PTRResource()
		return r.PTR.String(), true, err
	case dnsmessage.TypeMX:
		r, err := p.MXResource()
		return fmt.Sprintf("%d %s", r.Pref, r.MX), true, err
	case dnsmessage.TypeSRV:
		r, err := p.SRVResource()
		return fmt.Sprintf("%d %d %d %s", r.Priority, r.Weight, r.Port, r.Target), true, err
	case dnsmessage.TypeSOA:
		r, err := p.SOAResource()
		return fmt.Sprintf("%s %s %d %d %d %d %d", r.NS, r.MBox, r.Serial, r.Refresh, r.Retry, r.Expire, r.MinTTL), true, err
	case dnsmessage.TypeTXT:
		// A TXT record longer than 255 bytes is split into strings that
		// mean one text together.
		r, err := p.TXTResource()
		return strings.Join(r.TXT, ""), true, err
	}
	return "", false, p.SkipAnswer()
}
