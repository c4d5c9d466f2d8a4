// Package conntrackd runs conntrackd (Debian's package) for a failover
// pair: it writes its configuration from [ha.conntrackd], supervises the
// daemon, and runs its commands on VRRP transitions. IPVS connection sync
// carries IPVS's own state; conntrackd (FTFW mode) carries the conntrack
// entries of masqueraded connections, which hold the SNAT translation the
// real servers' replies need. The peer's entries wait in conntrackd's
// external cache until this box becomes master and commits them.
package conntrackd

import (
	"fmt"
	"net/netip"
	"strings"
)

// Settings are what conntrackd's configuration says.
type Settings struct {
	Interface   string
	Local, Peer netip.Addr // this box's and the peer's addresses on Interface
	Port        uint16
	// Dir holds the lock file and the control socket (lbd's runtime
	// directory, so that Debian's own conntrackd service, if it runs,
	// is not disturbed).
	Dir string
}

// Render returns conntrackd's configuration for s: FTFW over unicast UDP
// to the peer, TCP, UDP and SCTP entries only, never the pair's own traffic,
// logging to standard output (lbd's log).
func Render(s Settings) string {
	fam := "IPv4"
	if s.Peer.Is6() {
		fam = "IPv6"
	}
	var b strings.Builder
	// The sizes are conntrackd's documented suggestions for a busy
	// director; the hash holds the external cache (the peer's entries).
	fmt.Fprintf(&b, `# Written by lbd from [ha.conntrackd]; rewritten at every start.
Sync {
	Mode FTFW {
		DisableExternalCache off
		ResendQueueSize 131072
	}
	UDP {
		%[1]s_address %[2]s
		%[1]s_Destination_Address %[3]s
		Port %[4]d
		Interface %[5]s
		SndSocketBuffer 1249280
		RcvSocketBuffer 1249280
		Checksum on
	}
}
General {
	Systemd off
	HashSize 32768
	HashLimit 262144
	LogFile off
	Syslog off
	LockFile %[6]s/lock
	UNIX {
		Path %[6]s/ctl
	}
	NetlinkBufferSize 2097152
	NetlinkBufferSizeMaxGrowth 8388608
	NetlinkOverrunResync on
	Filter From Kernelspace {
		Protocol Accept {
			TCP
			UDP
			SCTP
		}
		Address Ignore {
			IPv4_address 127.0.0.1
			IPv6_address ::1
			%[1]s_address %[2]s
			%[1]s_address %[3]s
		}
	}
}
`, fam, s.Local, s.Peer, s.Port, s.Interface, s.Dir)
	return b.String()
}
