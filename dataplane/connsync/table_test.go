package connsync

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"
)

const (
	connHeader = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires PEName PEData"
	syncHeader = "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Origin Expires"
)

// kernelAddr prints a as ip_vs_conn_seq_show does: %08X of the IPv4
// address read as a number, %pI6 (eight groups of four lower-case hex
// digits) for IPv6.
func kernelAddr(a netip.Addr) string {
	if a.Is4() {
		b := a.As4()
		return fmt.Sprintf("%02X%02X%02X%02X", b[0], b[1], b[2], b[3])
	}
	b := a.As16()
	g := make([]string, 8)
	for i := range g {
		g[i] = fmt.Sprintf("%02x%02x", b[2*i], b[2*i+1])
	}
	return strings.Join(g, ":")
}

// kernelLine prints c as the kernel's file of layout l does.
func kernelLine(c Conn, l layout) string {
	s := fmt.Sprintf("%-3s %s %04X %s %04X %s %04X %-11s", c.Protocol, kernelAddr(c.Client.Addr()), c.Client.Port(),
		kernelAddr(c.Virtual.Addr()), c.Virtual.Port(), kernelAddr(c.Dest.Addr()), c.Dest.Port(), c.StateName())
	exp := int(c.Expires / time.Second)
	switch {
	case l == layoutSync:
		return fmt.Sprintf("%s %-6s %7d", s, c.Origin, exp)
	case c.PEName != "":
		return fmt.Sprintf("%s %7d %s callid", s, exp, c.PEName)
	}
	return fmt.Sprintf("%s %7d", s, exp)
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestReader reads lines as the kernel writes them (ip_vs_conn.c,
// ip_vs_conn_seq_show / ip_vs_conn_sync_seq_show), written out by hand.
func TestReader(t *testing.T) {
	for _, tc := range []struct {
		name, header, line string
		want               Conn
	}{
		{"IPv4 TCP", connHeader, "TCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED     899",
			Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"),
				State: 1, Expires: 899 * time.Second}},
		{"IPv6 TCP", connHeader, "TCP 2001:0002:0000:0001:0000:0000:0000:000b C350 2001:0002:0000:0100:0000:0000:0000:0001 01BB 2001:0002:0000:0003:0000:0000:0000:000b 1F90 SYN_RECV         59",
			Conn{Protocol: ProtoTCP, Client: ap("[2001:2:0:1::b]:50000"), Virtual: ap("[2001:2:0:100::1]:443"), Dest: ap("[2001:2:0:3::b]:8080"),
				State: 3, Expires: 59 * time.Second}},
		{"UDP", connHeader, "UDP C612010B D431 C6126401 0035 C612030C 0035 UDP             299",
			Conn{Protocol: ProtoUDP, Client: ap("198.18.1.11:54321"), Virtual: ap("198.18.100.1:53"), Dest: ap("198.18.3.12:53"), Expires: 299 * time.Second}},
		{"TCP template", connHeader, "TCP C612010B 0000 C6126402 0050 C612030B 0050 NONE            300",
			Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:0"), Virtual: ap("198.18.100.2:80"), Dest: ap("198.18.3.11:80"),
				Template: true, Expires: 300 * time.Second}},
		{"assured UDP template", connHeader, "UDP C6120100 0000 C6126402 0035 C612030B 0035 ASSURED          12",
			Conn{Protocol: ProtoUDP, Client: ap("198.18.1.0:0"), Virtual: ap("198.18.100.2:53"), Dest: ap("198.18.3.11:53"),
				State: 1, Template: true, Expires: 12 * time.Second}},
		{"firewall-mark template", connHeader, "IP  C612010B 0000 00000007 0000 C612030B 0000 NONE            360",
			Conn{Protocol: ProtoIP, Client: ap("198.18.1.11:0"), Virtual: ap("0.0.0.7:0"), Dest: ap("198.18.3.11:0"),
				Template: true, Expires: 360 * time.Second}},
		{"IPv6 firewall-mark template", connHeader, "IP  2001:0002:0000:0001:0000:0000:0000:000b 0000 0000:0107:dead:beef:0000:0000:0000:0000 0000 2001:0002:0000:0003:0000:0000:0000:000b 0000 NONE 10",
			Conn{Protocol: ProtoIP, Client: ap("[2001:2:0:1::b]:0"), Virtual: ap("[0:107:dead:beef::]:0"), Dest: ap("[2001:2:0:3::b]:0"),
				Template: true, Expires: 10 * time.Second}},
		{"SCTP", connHeader, "SCTP C612010B 9C40 C6126401 0B59 C612030B 0B59 ESTABLISHED     900",
			Conn{Protocol: ProtoSCTP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:2905"), Dest: ap("198.18.3.11:2905"),
				State: 8, Expires: 900 * time.Second}},
		{"ESP: states unknown", connHeader, "IP_50 C612010B 01F4 C6126401 01F4 C612030B 01F4 ERR!     60",
			Conn{Protocol: 50, Client: ap("198.18.1.11:500"), Virtual: ap("198.18.100.1:500"), Dest: ap("198.18.3.11:500"),
				State: StateUnknown, Expires: 60 * time.Second}},
		{"persistence engine", connHeader, "UDP C612010B 13C4 C6126401 13C4 C612030B 13C4 UDP 170 sip abc@host",
			Conn{Protocol: ProtoUDP, Client: ap("198.18.1.11:5060"), Virtual: ap("198.18.100.1:5060"), Dest: ap("198.18.3.11:5060"),
				Expires: 170 * time.Second, PEName: "sip"}},
		{"IPv6 service, IPv4 tunnel destination", connHeader, "TCP 2001:0002:0000:0001:0000:0000:0000:000b C350 2001:0002:0000:0100:0000:0000:0000:0001 0050 C612030B 0050 ESTABLISHED 5",
			Conn{Protocol: ProtoTCP, Client: ap("[2001:2:0:1::b]:50000"), Virtual: ap("[2001:2:0:100::1]:80"), Dest: ap("198.18.3.11:80"),
				State: 1, Expires: 5 * time.Second}},
		{"sync layout, synced", syncHeader, "TCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED SYNC       899",
			Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"),
				State: 1, Expires: 899 * time.Second, Origin: OriginSync}},
		{"sync layout, local", syncHeader, "UDP C612010B D431 C6126401 0035 C612030C 0035 UDP         LOCAL      299",
			Conn{Protocol: ProtoUDP, Client: ap("198.18.1.11:54321"), Virtual: ap("198.18.100.1:53"), Dest: ap("198.18.3.12:53"),
				Expires: 299 * time.Second, Origin: OriginLocal}},
		{"before persistence engines", "Pro FromIP   FPrt ToIP     TPrt DestIP   DPrt State       Expires", "TCP C612010B 9C40 C6126401 0050 C612030B 0050 CLOSE_WAIT 60",
			Conn{Protocol: ProtoTCP, Client: ap("198.18.1.11:40000"), Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"),
				State: 7, Expires: 60 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.header + "\n" + tc.line + "\n"))
			got, err := r.Next()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after the only entry: %v, want io.EOF", err)
			}
		})
	}
}

// TestReaderErrors: each malformed line is an error naming its line.
func TestReaderErrors(t *testing.T) {
	good := "TCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED 899"
	for _, tc := range []struct {
		name, input string
		line        int
		err         string
	}{
		{"no header", "", 1, "no header"},
		{"another file's header", "IP Virtual Server version 1.2.1\n", 1, "not the header"},
		{"too few fields", connHeader + "\n" + good + "\nTCP C612010B 9C40\n", 3, "3 fields"},
		{"too many fields", connHeader + "\n" + good + " sip callid more\n", 2, "12 fields"},
		{"origin in the plain layout", connHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED SYNC 899\n", 2, "not a count of seconds"},
		{"no origin in the sync layout", syncHeader + "\n" + good + "\n", 2, "9 fields"},
		{"unknown origin", syncHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED PEER 899\n", 2, `origin "PEER"`},
		{"unknown protocol", connHeader + "\nGRE C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED 899\n", 2, `unknown protocol "GRE"`},
		{"protocol number with a sign", connHeader + "\nIP_+5 C612010B 9C40 C6126401 0050 C612030B 0050 NONE 899\n", 2, "unknown protocol"},
		{"seven hex digits", connHeader + "\nTCP C61201B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED 899\n", 2, "client: address"},
		{"dotted IPv4", connHeader + "\nTCP 198.18.1.11 9C40 C6126401 0050 C612030B 0050 ESTABLISHED 899\n", 2, "client: address"},
		{"compressed IPv6", connHeader + "\nTCP 2001:2:0:1::b C350 2001:0002:0000:0100:0000:0000:0000:0001 0050 C612030B 0050 ESTABLISHED 5\n", 2, "client: address"},
		{"IPv6 with a zone", connHeader + "\nTCP 2001:0002:0000:0001:0000:0000:0000:0b%1 C350 2001:0002:0000:0100:0000:0000:0000:0001 0050 C612030B 0050 ESTABLISHED 5\n", 2, "client: address"},
		{"virtual of the other family", connHeader + "\nTCP C612010B 9C40 2001:0002:0000:0100:0000:0000:0000:0001 0050 C612030B 0050 ESTABLISHED 899\n", 2, "virtual: address"},
		{"short port", connHeader + "\nTCP C612010B 9C4 C6126401 0050 C612030B 0050 ESTABLISHED 899\n", 2, `client: port "9C4"`},
		{"port not hex", connHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 00G0 ESTABLISHED 899\n", 2, `destination: port "00G0"`},
		{"unknown TCP state", connHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 0050 UDP 899\n", 2, `"UDP" is not a state of a TCP connection`},
		{"unknown template state", connHeader + "\nUDP C612010B 0000 C6126401 0050 C612030B 0050 ESTABLISHED 899\n", 2, "not a state of a UDP connection"},
		{"protocol IP with a client port", connHeader + "\nIP C612010B 0001 00000007 0000 C612030B 0000 NONE 899\n", 2, "only a firewall-mark template"},
		{"negative expiry", connHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED -1\n", 2, "expires"},
		{"a line too long", connHeader + "\n" + good + strings.Repeat(" ", 2000) + "\n", 2, "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tc.input))
			var err error
			for err == nil {
				_, err = r.Next()
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v, want a *ParseError", err)
			}
			if pe.Line != tc.line || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), fmt.Sprintf("line %d", tc.line)) {
				t.Errorf("error %q, want line %d and %q", err, tc.line, tc.err)
			}
			if _, err := r.Next(); err != io.EOF {
				t.Errorf("after an error: %v, want io.EOF", err)
			}
		})
	}
}

// TestReaderStreams reads a table of many lines through All, in order.
func TestReaderStreams(t *testing.T) {
	var b strings.Builder
	b.WriteString(connHeader + "\n")
	const n = 5000
	for i := range n {
		c := Conn{Protocol: ProtoTCP, Client: netip.AddrPortFrom(netip.MustParseAddr("198.18.1.11"), uint16(1024+i)),
			Virtual: ap("198.18.100.1:80"), Dest: ap("198.18.3.11:80"), State: 1, Expires: time.Duration(i) * time.Second}
		b.WriteString(kernelLine(c, layoutConn) + "\n")
	}
	i := 0
	for c, err := range NewReader(strings.NewReader(b.String())).All() {
		if err != nil {
			t.Fatal(err)
		}
		if c.Client.Port() != uint16(1024+i) || c.Expires != time.Duration(i)*time.Second {
			t.Fatalf("entry %d: %v", i, c)
		}
		i++
	}
	if i != n {
		t.Errorf("read %d entries, want %d", i, n)
	}
}

// FuzzReader: whatever the input, the reader does not panic, and every
// entry it reads, printed as the kernel prints it, reads back the same.
func FuzzReader(f *testing.F) {
	f.Add(connHeader + "\nTCP C612010B 9C40 C6126401 0050 C612030B 0050 ESTABLISHED     899\n")
	f.Add(connHeader + "\nIP  C612010B 0000 00000007 0000 C612030B 0000 ASSURED 360\nUDP C612010B 0000 C6126402 0035 C612030B 0035 NONE 1 sip x\n")
	f.Add(syncHeader + "\nTCP 2001:0002:0000:0001:0000:0000:0000:000b C350 2001:0002:0000:0100:0000:0000:0000:0001 01BB C612030B 1F90 SYN_RECV SYNC 59\n")
	f.Add(connHeader + "\nSCTP C612010B 9C40 C6126401 0B59 C612030B 0B59 C-ECHOED 3\nIP_51 C612010B 0000 C6126401 0000 C612030B 0000 ERR! 3\n")
	f.Fuzz(func(t *testing.T, input string) {
		r := NewReader(strings.NewReader(input))
		for c, err := range r.All() {
			if err != nil {
				return
			}
			l := layoutConn
			if c.Origin != OriginUnknown {
				l = layoutSync
			}
			header := map[layout]string{layoutConn: connHeader, layoutSync: syncHeader}[l]
			if c.State == StateUnknown {
				continue // its state name is not kept
			}
			back, err := NewReader(strings.NewReader(header + "\n" + kernelLine(c, l) + "\n")).Next()
			if err != nil || back != c {
				t.Fatalf("%+v printed as %q reads back as %+v, %v", c, kernelLine(c, l), back, err)
			}
		}
	})
}
