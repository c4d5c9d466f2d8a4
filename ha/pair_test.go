package ha

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/lbdproject/lbd/config"
	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/ha/vrrp"
)

// loneSocket is a VRRP socket on a link where nobody else speaks: what it
// sends is counted and goes nowhere.
type loneSocket struct {
	src    netip.Addr
	closed chan struct{}
	once   sync.Once
	mu     sync.Mutex
	sent   []uint8 // priorities
}

func (s *loneSocket) Receive() (vrrp.Packet, error) {
	<-s.closed
	return vrrp.Packet{}, errors.New("closed")
}

func (s *loneSocket) SendFrom(a vrrp.Advert, src, _ netip.Addr) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if src != s.src {
		return fmt.Errorf("sent from %v, want %v", src, s.src)
	}
	s.sent = append(s.sent, a.Priority)
	return nil
}

func (s *loneSocket) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *loneSocket) Source() (netip.Addr, error) { return s.src, nil }

const onePair = `
[[service]]
name = "web"
vips = ["198.18.100.10"]
port = 80
real_server = [{ address = "198.19.10.11" }]

[[service]]
name = "other"
vips = ["198.18.100.20"]
port = 80
real_server = [{ address = "198.19.10.11" }]

[[vrrp]]
name = "outside"
interface = "eth0"
virtual_router_id = 51
advert_interval = "10ms"
addresses = ["198.18.2.10/24", "198.19.10.1/24 dev eth1"]
services = ["web"]
track_interfaces = ["eth1"]
`

// failovers records what a Pair hands the dataplane.
type failovers struct {
	mu   sync.Mutex
	cfg  *config.Config
	last string
}

func (f *failovers) set(s desired.Serving, fl []desired.Floating) {
	st := desired.Compute(desired.Input{Config: f.cfg, Serving: s, Floating: fl})
	f.mu.Lock()
	f.last = fmt.Sprint(st.VIPs, fl)
	f.mu.Unlock()
}

func (f *failovers) wait(t *testing.T, what, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f.mu.Lock()
		got := f.last
		f.mu.Unlock()
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the dataplane got %s, want %s", what, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A box alone on its link becomes master, serves the carried VIP and binds
// the floating addresses; a tracked interface going down gives them up,
// and so does stopping, after a priority-0 advert.
func TestPairAlone(t *testing.T) {
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(onePair)})
	if err != nil {
		t.Fatal(err)
	}
	f := &failovers{cfg: cfg}
	sock := &loneSocket{src: netip.MustParseAddr("198.18.2.2"), closed: make(chan struct{})}
	links := make(chan func(string, bool), 1)
	p := New(cfg, Options{
		Listen:     func(vrrp.Link) (Socket, error) { return sock, nil },
		OnFailover: f.set,
		Links: func(ctx context.Context, names []string, up func(string, bool)) error {
			if fmt.Sprint(names) != "[eth0 eth1]" {
				t.Errorf("tracked %v, want [eth0 eth1]", names)
			}
			links <- up
			<-ctx.Done()
			return nil
		},
	})
	f.set(p.Failover())
	const backup = "[198.18.100.20] [{198.18.2.10/24 eth0 true} {198.19.10.1/24 eth1 true}]"
	const master = "[198.18.100.10 198.18.100.20] [{198.18.2.10/24 eth0 false} {198.19.10.1/24 eth1 false}]"
	f.wait(t, "before Run", backup)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	f.wait(t, "alone on the link", master)
	up := <-links
	up("eth1", false)
	f.wait(t, "eth1 down", backup)
	if st, _ := p.Status(); st[0].State != vrrp.Fault {
		t.Errorf("state %v, want FAULT", st[0].State)
	}
	up("eth1", true)
	f.wait(t, "eth1 up again", master)

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.wait(t, "stopped", backup)
	sock.mu.Lock()
	last := sock.sent[len(sock.sent)-1]
	sock.mu.Unlock()
	if last != 0 {
		t.Errorf("last advert at priority %d, want 0", last)
	}
}

// Sockets that cannot be opened (an interface missing) hold everything
// and are retried; Status says why.
func TestPairRetriesOpening(t *testing.T) {
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(onePair)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	tries := 0
	p := New(cfg, Options{
		Retry: 10 * time.Millisecond,
		Listen: func(vrrp.Link) (Socket, error) {
			mu.Lock()
			defer mu.Unlock()
			tries++
			return nil, errors.New("no such interface")
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := tries
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tries, want retries", n)
		}
	}
	if st, err := p.Status(); st != nil || err == nil {
		t.Errorf("Status = %v, %v; want no instances and the error", st, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// The daemon's faults and the tracked interfaces combine: any one puts
// the instance in FAULT, one set before Run holds from the start, and
// the instance leaves FAULT only when none is left.
func TestPairDaemonFaults(t *testing.T) {
	cfg, err := config.Parse([]string{"lbd.toml"}, [][]byte{[]byte(onePair)})
	if err != nil {
		t.Fatal(err)
	}
	f := &failovers{cfg: cfg}
	sock := &loneSocket{src: netip.MustParseAddr("198.18.2.2"), closed: make(chan struct{})}
	links := make(chan func(string, bool), 1)
	p := New(cfg, Options{
		Listen:     func(vrrp.Link) (Socket, error) { return sock, nil },
		OnFailover: f.set,
		Links: func(ctx context.Context, names []string, up func(string, bool)) error {
			up("eth0", true)
			up("eth1", true)
			links <- up
			<-ctx.Done()
			return nil
		},
	})
	const backup = "[198.18.100.20] [{198.18.2.10/24 eth0 true} {198.19.10.1/24 eth1 true}]"
	const master = "[198.18.100.10 198.18.100.20] [{198.18.2.10/24 eth0 false} {198.19.10.1/24 eth1 false}]"
	p.SetFault("outside", FaultSyncs, true)
	f.set(p.Failover())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	up := <-links
	stateIs := func(what string, want vrrp.State) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if st, _ := p.Status(); len(st) == 1 && st[0].State == want {
				return
			}
			if time.Now().After(deadline) {
				st, _ := p.Status()
				t.Fatalf("%s: %+v, want %v", what, st, want)
			}
		}
	}
	stateIs("syncs failing from the start", vrrp.Fault)
	f.wait(t, "syncs failing from the start", backup)
	up("eth1", false)
	p.SetFault("outside", FaultSyncs, false)
	stateIs("syncs fine, eth1 down", vrrp.Fault)
	up("eth1", true)
	f.wait(t, "no fault left", master)
	p.SetFault("outside", FaultQuorum, true)
	f.wait(t, "below quorum", backup)
	stateIs("below quorum", vrrp.Fault)
	p.SetFault("outside", FaultQuorum, false)
	f.wait(t, "quorum again", master)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
